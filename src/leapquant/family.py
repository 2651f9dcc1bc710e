"""The two model families one pool format serves, each one gate choice over the shared machinery.

- ``KDA`` (Kimi Delta Attention, Kimi-Linear): a per-channel gate. The window carries each
  entry's decay ``gbuf`` fp16 ``[L, K]`` and the window's summed log-gate ``pcum`` fp32 ``[K]``;
  every head has its own q and k.
- ``GDN`` (Gated DeltaNet, Qwen3.5's linear-attention layers): a scalar gate. The window carries
  no per-entry decay: the step decays the live weights ``w`` themselves and the gate product
  ``p`` fp32 (one a program); 16 key heads serve 32 value heads (GQA), so a program (slot, value
  head) reads q and k of key head ``head // key_group``.

The checkpoint, its pool region and everything the flush does after rebuilding the state are
the same for both. The kernels take the family as compile-time switches (``SCALAR_GATE``,
``KEY_GROUP``): one kernel source, a compiled variant a family.

Sources: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-{flush,step}
and conless-leapquant-gdn-{flush,step}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .geometry import HEAD_COUNTS, K, L, REGION_BYTES, V


@dataclass(frozen=True)
class Family:
    """One model family's window and token layout.

    Attributes:
        name: "kda" or "gdn".
        scalar_gate: one decay a head and token (GDN) instead of one a channel (KDA).
        key_group: value heads that share one key head's q and k (1: none shared).
        window: ``{name: (dtype, trailing shape after [NS, NH], value of an empty window)}`` of
            the window tensors, in the order the functional calls take them.
        gate_inputs: ``{name: trailing shape after [N, NH]}`` of the step's gate pre-activation
            ``a`` and of ``dt_bias`` (after ``[NH]``).
    """

    name: str
    scalar_gate: bool
    key_group: int
    window: dict
    gate_inputs: dict

    def key_heads(self, heads: int) -> int:
        """Key heads (q and k rows) of a token of ``heads`` value heads."""
        return heads // self.key_group

    def mixed_width(self, heads: int) -> int:
        """Elements of one decode-step row ``mixed``: q of every key head, then k, then v of every
        head (KDA at 32 heads: 12,288; GDN: 8,192)."""
        return 2 * self.key_heads(heads) * K + heads * V

    def head_counts(self) -> tuple[int, ...]:
        """Heads a pool of this family may hold (tensor parallelism splits whole key groups)."""
        return tuple(n for n in HEAD_COUNTS if n % self.key_group == 0)

    def _bytes(self, names) -> int:
        # bytes one program's window tensors ``names`` hold
        return sum(torch.empty((), dtype=dt).element_size() * math.prod(shape)
                   for n, (dt, shape, _) in self.window.items() if n in names)

    @property
    def flush_floor_bytes(self) -> int:
        """Bytes one flushed program moves at least: the checkpoint read and written, the window
        read, its weights and gate reset (KDA: 56,448; GDN: 47,240 = the GDN request's 46.1 KB)."""
        return 2 * REGION_BYTES + self._bytes(self.window) + self._bytes(set(self.window) - {"kbuf", "ubuf"})

    @property
    def step_floor_bytes(self) -> int:
        """Bytes one decode-step program moves at least (the step requests' count: every window
        row): read the checkpoint, the window, q, k, v, ``a``, ``b`` and the fill count; write
        o, the appended k and u rows, the gate's words (KDA: the gbuf row, pcum, one w word; GDN:
        the decayed w row and p) and the fill count. KDA: 34,894; GDN: 29,332."""
        a = 2 * math.prod(self.gate_inputs["a"])
        gate_out = (2 * K + self._bytes({"pcum"}) + 4) if not self.scalar_gate else self._bytes({"w", "p"})
        read = REGION_BYTES + self._bytes(self.window) + 2 * (2 * K + V) + a + 2 + 4
        return read + 2 * V + 2 * K + 2 * V + gate_out + 4

    def window_fields(self) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """``{name: (dtype, trailing shape)}`` of the window, as ``format.check_batch`` takes."""
        return {n: (dt, shape) for n, (dt, shape, _) in self.window.items()}

    def kernel_window(self, window) -> tuple:
        """The window as both kernels take it, ``(kbuf, ubuf, gbuf, w, pcum)``: a family
        without per-entry decays passes None for ``gbuf`` and its gate product ``p`` as
        ``pcum`` (``SCALAR_GATE``). ``window``: a dict by name or a tuple in ``self.window``'s
        order."""
        if not isinstance(window, dict):
            window = dict(zip(self.window, window))
        if self.scalar_gate:
            return window["kbuf"], window["ubuf"], None, window["w"], window["p"]
        return window["kbuf"], window["ubuf"], window["gbuf"], window["w"], window["pcum"]


KDA = Family(
    name="kda", scalar_gate=False, key_group=1,
    window={
        "kbuf": (torch.bfloat16, (L, K), 0),
        "ubuf": (torch.bfloat16, (L, V), 0),
        "gbuf": (torch.float16, (L, K), 1),
        "w": (torch.float32, (L,), 0),
        "pcum": (torch.float32, (K,), 0),
    },
    gate_inputs={"a": (K,), "dt_bias": (K,)},
)
GDN = Family(
    name="gdn", scalar_gate=True, key_group=2,
    window={
        "kbuf": (torch.bfloat16, (L, K), 0),
        "ubuf": (torch.bfloat16, (L, V), 0),
        "w": (torch.float32, (L,), 0),
        "p": (torch.float32, (), 1),
    },
    gate_inputs={"a": (), "dt_bias": ()},
)
FAMILIES = {f.name: f for f in (KDA, GDN)}
