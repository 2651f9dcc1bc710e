"""LeapQuant recurrent states for Gated DeltaNet (GDN: Qwen3.5's linear-attention layers, a scalar
gate, 16 key heads serving 32 value heads): the flush and the decode step on one caller-owned
pool, with ``leapquant.kda``'s surface on the same machinery (``leapquant.family``).

Public entry points: ``Pool``, ``slot_nbytes``, ``state_specs``; ``decode_inplace`` and
``Overlap``; ``run`` and ``flush_inplace``; ``step`` and ``step_inplace``; ``write_state``,
``read_state``, ``copy_slots``; ``decode``; ``reference`` and ``step_reference`` (the fp32
PyTorch definitions). Sources: LeapQuant (arXiv 2609.38166); NVlabs/kda requests
conless-leapquant-gdn-flush and conless-leapquant-gdn-step.
"""

import functools

from ..family import GDN as FAMILY
from ..flush.naive import scalar_reference as reference
from ..format import decode
from ..geometry import ERROR_KINDS, H, K, L, R, V
from ..interface import flush_inplace
from ..layer import Overlap
from ..pool import slot_nbytes as _slot_nbytes, state_specs as _state_specs
from ..state import copy_slots, read_state, write_state
from ..step.naive import scalar_step_reference as step_reference
from .functions import Pool, decode_inplace, run, step, step_inplace

slot_nbytes = functools.partial(_slot_nbytes, family=FAMILY)
state_specs = functools.partial(_state_specs, family=FAMILY)

__all__ = ["ERROR_KINDS", "FAMILY", "H", "K", "L", "R", "V", "Overlap", "Pool", "copy_slots", "decode",
           "decode_inplace", "flush_inplace", "read_state", "reference", "run", "slot_nbytes", "state_specs", "step",
           "step_inplace", "step_reference", "write_state"]
