"""leapquant: LeapQuant quantized recurrent states for linear attention.

Source: LeapQuant (arXiv 2609.38166); the KDA checkpoint format and flush follow the NVlabs/kda
request conless-leapquant-kda-flush. The KDA path lives in ``leapquant.kda``."""

__version__ = "0.1.0"

# imported here so that the package object has ``kda`` as an attribute: Hugging Face kernels hands
# back this package (``get_kernel(...).kda``), and there is no ``import leapquant.kda`` to run
from . import gdn, kda  # noqa: E402,F401
