"""LeapQuant recurrent states for Kimi Delta Attention (KDA): the window-boundary flush and the
per-token decode step on one caller-owned pool.

Public entry points: ``Pool``; the flush ``run`` (functional) and ``flush_inplace``; the decode
step ``step`` (functional) and ``step_inplace``; ``write_state`` (an fp32 state into a slot);
``decode`` (checkpoint -> state); ``reference`` and ``step_reference`` (the fp32 PyTorch
definitions); the geometry constants. Sources: LeapQuant (arXiv 2609.38166); NVlabs/kda requests
conless-leapquant-kda-flush and conless-leapquant-kda-step.
"""

from .format import decode
from .geometry import H, K, L, R, V
from .interface import flush_inplace, run, step, step_inplace, write_state
from .flush.naive import reference
from .pool import Pool
from .step.naive import step_reference

__all__ = ["H", "K", "L", "R", "V", "Pool", "decode", "flush_inplace", "reference", "run", "step",
           "step_inplace", "step_reference", "write_state"]
