"""leapquant: LeapQuant quantized recurrent states for linear attention.

Source: LeapQuant (arXiv 2609.38166); the KDA checkpoint format and flush follow the NVlabs/kda
request conless-leapquant-kda-flush. The KDA path lives in ``leapquant.kda``."""

__version__ = "0.1.0"
