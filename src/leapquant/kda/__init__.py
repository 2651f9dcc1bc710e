"""LeapQuant recurrent states for Kimi Delta Attention (KDA, Kimi-Linear: a per-channel gate):
the window-boundary flush and the per-token decode step on one caller-owned pool.

Public entry points: ``Pool`` (``state_specs``, ``slot_nbytes``); the one call per layer and
token ``decode_inplace`` with its ``Overlap`` scope; the flush ``run`` (functional) and
``flush_inplace``; the decode step ``step`` (functional) and ``step_inplace``; the state in and
out of a pool, ``write_state``, ``read_state``, ``copy_slots``; ``decode`` (checkpoint -> state);
``reference`` and ``step_reference`` (the fp32 PyTorch definitions); the geometry constants. The
machinery is shared with ``leapquant.gdn`` (``leapquant.family``: the gate is the one choice).
Sources: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush and
conless-leapquant-kda-step.
"""

from ..family import KDA as FAMILY
from ..flush.naive import reference
from ..format import decode
from ..geometry import ERROR_KINDS, H, K, L, R, V
from ..interface import flush_inplace, run, step, step_inplace
from ..layer import Overlap, decode_inplace
from ..pool import Pool, slot_nbytes, state_specs
from ..state import copy_slots, read_state, write_state
from ..step.naive import step_reference

__all__ = ["ERROR_KINDS", "FAMILY", "H", "K", "L", "R", "V", "Overlap", "Pool", "copy_slots", "decode",
           "decode_inplace", "flush_inplace", "read_state", "reference", "run", "slot_nbytes", "state_specs", "step",
           "step_inplace", "step_reference", "write_state"]
