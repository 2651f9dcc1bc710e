"""Caller-owned state pool with the byte layout of SPEC section 7.

One flat fp32 buffer ``raw`` of ``num_slots * SLOT_WORDS + POOL_OFFSET_WORDS`` words; the (slot,
head) region starts at word ``POOL_OFFSET_WORDS + slot * SLOT_WORDS + head * V * K`` and holds
the checkpoint: codes int8 ``[V, K]`` row-major at byte 0, ``s_k`` fp32 at byte 16384, ``s_v``
fp32 at byte 16896, and fp16 ``[R, K + V]`` rows ``(u[r] | q[r])`` at byte 17408. The window
lives in dense tensors beside it. Source: NVlabs/kda request conless-leapquant-kda-flush.
"""

from __future__ import annotations

import operator

import torch

from .format import MIXED_WIDTH
from .geometry import (
    CODES_BYTES, H, HEAD_WORDS, K, L, POOL_OFFSET_WORDS, R, SK_BYTES, SLOT_WORDS, SV_BYTES,
    UQ_BYTES, V,
)


class Pool:
    """KDA recurrent states of ``num_slots`` sequence slots, stored as LeapQuant checkpoints.

    Attributes (``NS = num_slots``; slot 0 is reserved and never flushed):
        raw: fp32 ``[NS * SLOT_WORDS + POOL_OFFSET_WORDS]``, zeros, holding every checkpoint.
        codes: int8 view ``[NS, H, V, K]``; s_k: fp32 view ``[NS, H, K]``;
        s_v: fp32 view ``[NS, H, V]``; uq: fp16 view ``[NS, H, R, K + V]``;
        u, q: fp16 views ``uq[..., :K]`` ``[NS, H, R, K]`` and ``uq[..., K:]`` ``[NS, H, R, V]``.
        kbuf: bf16 ``[NS, H, L, K]`` zeros; ubuf: bf16 ``[NS, H, L, V]`` zeros;
        w: fp32 ``[NS, H, L]`` zeros; pcum: fp32 ``[NS, H, K]`` zeros;
        gbuf: fp16 ``[NS, H, L, K]`` ones; hcnt: int32 ``[NS, H]`` zeros (the fill counter).

    On CUDA the flush and step kernels are chosen (``kernel``, ``step_kernel``: ``"gluon"`` or
    ``"triton"``, see ``leapquant.kda.kernel.choose``), compiled and run on nothing due (slot 0)
    when the pool is built: the step once, the flush once per flag-scan tile its pool calls may
    use (``warm_up_slots``: four builds of the Gluon kernel, one of the portable one), so neither
    ``flush_inplace`` nor ``step_inplace`` compiles. Raises ValueError if ``num_slots < 2``,
    TypeError if ``num_slots`` is not an int; ValueError for a CUDA device when CUDA is not
    available.

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
    """

    def __init__(self, num_slots: int, device="cuda"):
        if isinstance(num_slots, bool) or not hasattr(num_slots, "__index__"):
            raise TypeError(f"num_slots must be an int, got {type(num_slots).__name__}")
        num_slots = operator.index(num_slots)
        if num_slots < 2:
            raise ValueError(f"num_slots must be >= 2 (slot 0 is reserved), got {num_slots}")
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device is cuda, but CUDA is not available: pass device='cpu'")
        self.num_slots = num_slots
        NS = num_slots
        self.raw = torch.zeros(NS * SLOT_WORDS + POOL_OFFSET_WORDS, dtype=torch.float32, device=device)
        self.device = dev = self.raw.device  # "cuda" resolved to "cuda:N", as tensors report it
        self.codes = self._view(torch.int8, (NS, H, V, K), (K, 1), CODES_BYTES)
        self.s_k = self._view(torch.float32, (NS, H, K), (1,), SK_BYTES)
        self.s_v = self._view(torch.float32, (NS, H, V), (1,), SV_BYTES)
        self.uq = self._view(torch.float16, (NS, H, R, K + V), (K + V, 1), UQ_BYTES)
        self.u = self.uq[..., :K]
        self.q = self.uq[..., K:]
        self.kbuf = torch.zeros(NS, H, L, K, dtype=torch.bfloat16, device=dev)
        self.ubuf = torch.zeros(NS, H, L, V, dtype=torch.bfloat16, device=dev)
        self.w = torch.zeros(NS, H, L, dtype=torch.float32, device=dev)
        self.pcum = torch.zeros(NS, H, K, dtype=torch.float32, device=dev)
        self.gbuf = torch.ones(NS, H, L, K, dtype=torch.float16, device=dev)
        self.hcnt = torch.zeros(NS, H, dtype=torch.int32, device=dev)
        self.kernel = self.step_kernel = None  # CPU: the PyTorch flush and step
        if dev.type == "cuda":
            from .launch import pick_words
            from .kernel import choose

            self.kernel = choose(dev)  # picked once each, for the pool's life
            self.step_kernel = choose(dev, "step")
            self.picks = torch.empty(pick_words(NS, dev), dtype=torch.int32, device=dev)  # kernel scratch
            self._warm_up()

    def _view(self, dtype, shape, inner_strides, byte_offset):
        # strides and offsets in units of dtype; a slot spans SLOT_WORDS words, a head V*K words
        per_word = 4 // torch.empty((), dtype=dtype).element_size()
        strides = (SLOT_WORDS * per_word, HEAD_WORDS * per_word, *inner_strides)
        offset = POOL_OFFSET_WORDS * per_word + byte_offset * per_word // 4
        return self.raw.view(dtype).as_strided(shape, strides, offset)

    @property
    def checkpoint(self):
        """``(codes, s_k, s_v, u, q)`` views, ``[NS, H, ...]``."""
        return self.codes, self.s_k, self.s_v, self.u, self.q

    @property
    def window(self):
        """``(kbuf, ubuf, gbuf, w, pcum)``, ``[NS, H, ...]``."""
        return self.kbuf, self.ubuf, self.gbuf, self.w, self.pcum

    def check_index(self, idx: torch.Tensor) -> None:
        """Check slot ids on the host (synchronises). ``idx``: integer tensor ``[N]`` of slot
        ids (entries <= 0 are padding and may repeat), on any device.

        Raises TypeError if ``idx`` is not an integer tensor; ValueError for an id >= num_slots or a
        positive id given twice. ``flush_inplace`` and ``step_inplace`` trust ``idx`` and do not
        check its values (that would synchronise); call this where an engine builds ``idx``.
        Source: SPEC section 7 (NVlabs/kda request conless-leapquant-kda-flush)."""
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"idx must be a torch.Tensor, got {type(idx).__name__}")
        if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
            raise TypeError(f"idx must hold integer slot ids, got {idx.dtype}")
        ids = idx.detach().cpu().long()
        if ids.numel() and int(ids.max()) >= self.num_slots:
            raise ValueError(f"idx holds slot {int(ids.max())}, but the pool has {self.num_slots} slots")
        live = ids[ids > 0]
        if live.unique().numel() != live.numel():
            raise ValueError("idx holds a slot more than once")

    def _warm_up(self):
        # compile and run the pool's kernels once on nothing (slot 0: never flushed, and a step
        # there only zeroes its output row)
        from .kernel import launch_flush, launch_step

        dev = self.device
        q0 = torch.zeros(V, R, dtype=torch.float32, device=dev)
        idx = torch.zeros(1, dtype=torch.int32, device=dev)
        # the flush once per flag-scan tile a call may use, so that no later call compiles (the
        # interpreter compiles nothing: one launch)
        for slots in warm_up_slots(self.kernel) if dev.type == "cuda" else [1]:
            launch_flush(self.checkpoint, self.checkpoint, self.window, q0, idx=idx.new_zeros(slots),
                         hcnt=self.hcnt, picks=self.picks, kernel=self.kernel)
        mixed = torch.zeros(1, MIXED_WIDTH, dtype=torch.bfloat16, device=dev)
        hk = H * K
        token = (mixed[:, :hk], mixed[:, hk:2 * hk], mixed[:, 2 * hk:],
                 torch.zeros(1, H, K, dtype=torch.bfloat16, device=dev), torch.zeros(1, H, dtype=torch.bfloat16, device=dev))
        o = torch.empty(1, H, V, dtype=torch.bfloat16, device=dev)
        launch_step(self.checkpoint, self.window, self.hcnt, token, torch.zeros(H, device=dev),
                    torch.zeros(H, K, device=dev), o, idx=idx, kernel=self.step_kernel)
        if dev.type == "cuda":  # (the interpreted tests run this on a CPU pool)
            torch.cuda.synchronize(dev)


def warm_up_slots(kernel: str) -> list[int]:
    """Lengths of the padding ``idx`` (ids 0: nothing due) ``Pool._warm_up`` flushes with on a
    CUDA pool whose flush kernel is ``kernel`` ("gluon" or "triton"): one a flag-scan tile its
    pool calls may use (``pool_tiles()`` of the kernel's module; the Gluon kernel picks one by
    the call's candidates, ``launch.flag_tile``), so that every build compiles with the pool."""
    from .kernel import module

    return [max(tile // H, 1) for tile in module(kernel).pool_tiles()]


def check_call(pool, idx) -> None:
    """The checks every in-place call makes on its pool and slot ids (``flush_inplace``,
    ``step_inplace``, ``write_state``), without reading the ids' values (no host sync):
    TypeError unless ``pool`` is a ``Pool`` of this package and ``idx`` an int32 tensor;
    ValueError unless ``idx`` is 1-D, contiguous and on the pool's device."""
    if not isinstance(pool, Pool):
        raise TypeError(f"pool must be a {Pool.__module__}.Pool, got {type(pool).__module__}.{type(pool).__qualname__}"
                        " (a Pool of another copy of the package?)")
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"idx must be a torch.Tensor, got {type(idx).__name__}")
    if idx.dtype != torch.int32:
        raise TypeError(f"idx must have dtype torch.int32, got {idx.dtype}")
    if idx.dim() != 1:
        raise ValueError(f"idx must be 1-D, got shape {list(idx.shape)}")
    if idx.device != pool.device:
        raise ValueError(f"idx is on {idx.device}, but the pool is on {pool.device}")
    if not idx.is_contiguous():
        raise ValueError("idx must be contiguous")


def check_on_pool(name: str, t, dtype: torch.dtype, shape: tuple[int, ...], pool: Pool, dense: bool = True) -> None:
    """TypeError unless ``t`` is a ``dtype`` tensor; ValueError unless it has ``shape``, lies on
    the pool's device and (``dense``) is contiguous."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(t.shape)}")
    if t.device != pool.device:
        raise ValueError(f"{name} is on {t.device}, but the pool is on {pool.device}")
    if dense and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
