"""LeapQuant checkpoint flush for Kimi Delta Attention (KDA) recurrent states.

Public entry points: ``run`` (functional flush), ``Pool`` and ``flush_inplace`` (the serving
path), ``decode`` (checkpoint -> state), ``reference`` (the fp32 PyTorch flush that defines the
math) and the geometry constants. Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request
conless-leapquant-kda-flush.
"""

from .format import decode
from .geometry import H, K, L, R, V
from .interface import flush_inplace, run
from .flush.naive import reference
from .pool import Pool

__all__ = ["H", "K", "L", "R", "V", "Pool", "decode", "flush_inplace", "reference", "run"]
