"""The caller-owned state pool: every (slot, head) program's checkpoint and window, in one of two
layouts, on memory the pool allocates or the engine hands it.

Layouts (``geometry.LAYOUTS``):

- ``"packed"`` (the default): ``raw`` fp32 ``[NS, heads, REGION_WORDS]``; the (slot, head)
  region is exactly one checkpoint of 19,456 bytes (a multiple of 128): codes int8 ``[V, K]``
  row-major at byte 0, ``s_k`` fp32 at byte 16384, ``s_v`` fp32 at byte 16896, fp16
  ``[R, K + V]`` rows ``(u[r] | q[r])`` at byte 17408.
- ``"request"``: the layout of the NVlabs/kda request conless-leapquant-kda-flush (SPEC section
  7): one flat fp32 ``raw`` of ``NS * (heads + 1) * V * K + POOL_OFFSET_WORDS`` words, the (slot,
  head) region at word ``POOL_OFFSET_WORDS + slot * (heads + 1) * V * K + head * V * K``, the
  checkpoint in its first 19,456 bytes as above; byte-compatible with the request's harness.

The window lives in dense tensors beside ``raw`` in both, the family's (``family.py``: KDA's
``kbuf, ubuf, gbuf, w, pcum``, GDN's ``kbuf, ubuf, w, p``). Source: LeapQuant (arXiv 2609.38166);
NVlabs/kda requests conless-leapquant-kda-flush and conless-leapquant-kda-step.
"""

from __future__ import annotations

import math
import operator

import torch

from .family import KDA, Family
from .geometry import (
    CODES_BYTES, ERROR_KINDS, H, HEAD_WORDS, K, LAYOUTS, POOL_OFFSET_WORDS, R, REGION_WORDS, SK_BYTES, SV_BYTES, UQ_BYTES, V,
)
from .launch import MOST_CTAS_PER_SM


def state_names(family: Family = KDA) -> tuple[str, ...]:
    """The tensors a pool's state is: ``raw``, the family's window, ``hcnt``."""
    return ("raw", *family.window, "hcnt")


STATE_NAMES = state_names(KDA)  # a KDA pool's


def state_specs(num_slots: int, heads: int = H, layout: str = "packed", family: Family = KDA) -> dict:
    """What a pool of ``num_slots`` slots and ``heads`` heads of ``family`` holds: ``{name: (dtype,
    shape, initial value)}`` for ``state_names(family)``, the tensors ``Pool.from_tensors`` takes
    (an engine allocates them from its own memory with these dtypes and shapes). Raises
    ValueError for an unknown layout or a head count outside ``family.head_counts()``."""
    _check_heads(heads, family)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    NS = num_slots
    raw = (NS, heads, REGION_WORDS) if layout == "packed" else (NS * (heads + 1) * HEAD_WORDS + POOL_OFFSET_WORDS,)
    window = {n: (dt, (NS, heads, *shape), init) for n, (dt, shape, init) in family.window.items()}
    return {"raw": (torch.float32, raw, 0), **window, "hcnt": (torch.int32, (NS, heads), 0)}


def slot_nbytes(heads: int = H, layout: str = "packed", family: Family = KDA) -> int:
    """Bytes one slot of a pool costs: its share of every state tensor and of the flush's
    scratch (4 bytes a program). KDA: 1,034,496 at 32 heads, packed; GDN: 887,168 (an fp32
    state: 2,097,152)."""
    specs = state_specs(1, heads, layout, family)
    state = sum(torch.empty((), dtype=dt).element_size() * math.prod(shape) for dt, shape, _ in specs.values())
    fixed = 4 * POOL_OFFSET_WORDS if layout == "request" else 0  # the request layout's offset, not a slot's
    return state - fixed + 4 * heads


class Pool:
    """The recurrent states of ``num_slots`` sequence slots, each ``heads`` programs stored as
    LeapQuant checkpoints plus their windows; a KDA pool (``leapquant.gdn.Pool`` is GDN's: the
    class attribute ``family``).

    Args:
        num_slots: slots, slot 0 included (reserved: never flushed; steps and writes on it are
            no-ops or go nowhere useful, so padding may point there).
        device: where the tensors live ("cuda", "cuda:1", "cpu").
        heads: heads a slot holds, one of 1, 2, 4, 8, 16, 32 (32: Kimi-Linear's KDA layers on one
            GPU; 16, 8, 4 with the heads split over 2, 4, 8 GPUs).
        layout: ``"packed"`` (default, 1.03 MB a slot at 32 heads) or ``"request"`` (the
            NVlabs/kda request's 64 KiB a head, byte-compatible with its harness, 2.57 MB a slot).
        flush_ctas_per_sm: resident CTAs an SM of the pool's flush (None: the kernel's own; the
            Gluon kernel runs 2, and 1 leaves half of each SM's shared memory to the kernels a
            flush overlaps, see ``decode_inplace``).

    Attributes (``NS = num_slots``, ``NH = heads``):
        raw: fp32, every checkpoint (its shape is the layout's, see ``state_specs``).
        codes: int8 view ``[NS, NH, V, K]``; s_k: fp32 view ``[NS, NH, K]``; s_v: fp32 view
        ``[NS, NH, V]``; uq: fp16 view ``[NS, NH, R, K + V]``; u, q: fp16 views ``uq[..., :K]``
        and ``uq[..., K:]``.
        kbuf: bf16 ``[NS, NH, L, K]``; ubuf: bf16 ``[NS, NH, L, V]``; gbuf: fp16 ``[NS, NH, L, K]``
        (ones); w: fp32 ``[NS, NH, L]``; pcum: fp32 ``[NS, NH, K]``; hcnt: int32 ``[NS, NH]``
        (the fill counter) -- the windows, zeros unless said.
        errors: int32 ``[2]`` on the device, counts of ``ERROR_KINDS`` (``error_counts()`` reads
        them: programs whose step met a full window never flushed, and out-of-domain states
        ``write_state`` stored); nothing resets it but the caller (``errors.zero_()``).
        nbytes: bytes of every tensor the pool holds (state and scratch).
        stack, stack_layer: the whole and this pool's layer in it, for a layer of ``Pool.layers``
        (else None, 0); the whole has ``layer_offsets``, int32 ``[num_layers]``, each layer's
        first slot, and ``side_scratch``, the copies of it with flush scratch of their own that an
        ``Overlap`` makes a side stream.
        kernel, step_kernel: the flush and step kernels this pool runs ("gluon" or "triton"; None
        on CPU), and kernel_reason, why (``leapquant.kernel.decide``).

    On CUDA the kernels are chosen, compiled and run once on nothing due when the pool is built,
    so that no later call compiles; where the Gluon kernels are not verified on this triton
    release they first pass a self-check against the portable kernels (``self_check.py``).

    Raises: TypeError if ``num_slots`` or ``heads`` is not an int; ValueError if ``num_slots <
    2``, for an unknown layout or head count, ``flush_ctas_per_sm`` other than None, 1 or 2, or for
    a CUDA device when CUDA is not available.

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
    """

    family: Family = KDA

    def __init__(self, num_slots: int, device="cuda", heads: int = H, layout: str = "packed",
                 flush_ctas_per_sm: int | None = None):
        num_slots = _check_slots(num_slots)
        heads = _check_count("heads", heads)
        specs = state_specs(num_slots, heads, layout, self.family)
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device is cuda, but CUDA is not available: pass device='cpu'")
        tensors = {n: torch.full(shape, init, dtype=dt, device=device) for n, (dt, shape, init) in specs.items()}
        self._bind(tensors, layout, flush_ctas_per_sm)

    @classmethod
    def from_tensors(cls, raw, *window_and_hcnt, flush_ctas_per_sm: int | None = None, **by_name) -> "Pool":
        """A packed-layout pool on tensors the caller owns (an engine's state cache): ``raw``, the
        family's window (KDA: ``kbuf, ubuf, gbuf, w, pcum``; GDN: ``kbuf, ubuf, w, p``) and
        ``hcnt``, in ``state_names`` order, checked once here against ``state_specs(num_slots,
        heads, family=cls.family)``, positional or by name: dtypes, shapes, one CUDA or CPU device,
        contiguous, ``raw`` 128-byte aligned on CUDA (16 on CPU). ``num_slots`` and ``heads`` are read off
        ``hcnt`` ``[NS, NH]``. The contents are the caller's (``write_state`` a slot before its
        first step); the pool writes only what its calls write. Scratch of its own (the flush's
        picks, 4 bytes a program, and the error counter) is allocated here.

        Raises TypeError for a non-tensor or a wrong dtype, ValueError for a wrong shape, a
        head count outside ``HEAD_COUNTS``, mixed devices, a non-contiguous or misaligned
        tensor, fewer than 2 slots."""
        names = state_names(cls.family)
        given = dict(zip(names, (raw, *window_and_hcnt)), **by_name)  # positional in names' order, or by name
        if sorted(given) != sorted(names) or len(window_and_hcnt) + len(by_name) != len(names) - 1:
            raise TypeError(f"from_tensors takes {', '.join(names)} (positional or by name); got "
                            f"{1 + len(window_and_hcnt)} positional and {sorted(by_name)}")
        hcnt = given["hcnt"]
        for name, t in given.items():
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if hcnt.dim() != 2:
            raise ValueError(f"hcnt must have shape [num_slots, heads], got {list(hcnt.shape)}")
        num_slots, heads = hcnt.shape
        _check_slots(num_slots)
        for name, (dtype, shape, _) in state_specs(num_slots, heads, family=cls.family).items():
            check_spec(name, given[name], dtype, shape, hcnt.device, "hcnt")
        align = 128 if raw.is_cuda else 16  # (CPU allocations are 64-byte aligned; the interpreter copies 16 bytes)
        if raw.data_ptr() % align:
            raise ValueError(f"raw must be {align}-byte aligned (each checkpoint region starts on such a boundary)")
        pool = cls.__new__(cls)
        pool._bind(given, "packed", flush_ctas_per_sm)
        return pool

    @classmethod
    def layers(cls, num_layers: int, num_slots: int, device="cuda", heads: int = H,
               flush_ctas_per_sm: int | None = None) -> list["Pool"]:
        """One packed pool per layer, all views of one allocation (``stack``, a pool of
        ``num_layers * num_slots`` slots): layer ``l``'s slot ``s`` is ``stack``'s slot
        ``l * num_slots + s``. Each layer's pool is an ordinary ``Pool`` (its own slot 0 reserved,
        its own error counter); what the stack adds is that an ``Overlap`` scope can flush
        several consecutive layers' windows in one launch (``Overlap(group=...)``), which pays the
        flush's fixed cost a launch (its code's first fetch, the flag scan) once for the group.

        Args: ``num_layers`` >= 1; ``num_slots``, ``device``, ``heads``, ``flush_ctas_per_sm`` as
        ``Pool``. Returns the layers' pools; each has ``stack`` (the whole) and ``stack_layer``.

        Raises: as ``Pool``; ValueError for ``num_layers < 1``."""
        num_layers = _check_count("num_layers", num_layers)
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        num_slots = _check_slots(num_slots)
        whole = cls(num_layers * num_slots, device, heads, flush_ctas_per_sm=flush_ctas_per_sm)
        names = state_names(cls.family)
        pools = []
        for layer in range(num_layers):
            part = slice(layer * num_slots, (layer + 1) * num_slots)
            pool = cls.from_tensors(**{n: getattr(whole, n)[part] for n in names}, flush_ctas_per_sm=flush_ctas_per_sm)
            pool.stack, pool.stack_layer = whole, layer
            pools.append(pool)
        # each layer's first slot in the stack, int32 on the device (an Overlap group's offsets)
        whole.layer_offsets = torch.arange(num_layers, dtype=torch.int32, device=whole.device) * num_slots
        whole.side_scratch = {}  # side stream -> the stack with flush scratch of its own (Overlap's)
        return pools

    def stack_ids(self, idx: torch.Tensor, count: int) -> torch.Tensor:
        """The ids, in this pool's ``stack``, of the slots ``idx`` (int32 ``[N]``) of this layer and
        the next ``count - 1`` layers: int32 ``[count * N]``, layer by layer, padding (ids <= 0)
        kept at 0 (the stack's reserved slot 0, never flushed). Device ops only, no host
        synchronisation; the result is a new tensor (small temporaries from the caching allocator).

        Raises TypeError unless ``idx`` is an int32 tensor, ValueError unless it is 1-D and this
        pool a layer of a ``Pool.layers`` stack with ``count`` layers from it on."""
        if self.stack is None or not 1 <= count <= self.stack.layer_offsets.numel() - self.stack_layer:
            raise ValueError(f"stack_ids of {count} layers: this pool is not a layer of a stack with that many from it on")
        check_index_tensor("idx", idx, self)
        offsets = self.stack.layer_offsets[self.stack_layer : self.stack_layer + count, None]
        return torch.where(idx > 0, idx + offsets, 0).view(-1)

    def _bind(self, tensors: dict, layout: str, flush_ctas_per_sm: int | None):
        self.stack, self.stack_layer = None, 0  # set by ``Pool.layers``
        for name in state_names(self.family):
            setattr(self, name, tensors[name])
        self.layout = layout
        if flush_ctas_per_sm is not None and flush_ctas_per_sm not in range(1, MOST_CTAS_PER_SM + 1):
            raise ValueError(f"flush_ctas_per_sm must be None or 1 .. {MOST_CTAS_PER_SM}, got {flush_ctas_per_sm!r}")
        self.flush_ctas_per_sm = flush_ctas_per_sm
        self.num_slots, self.heads = self.hcnt.shape
        self.device = dev = self.raw.device  # "cuda" resolved to "cuda:N", as tensors report it
        self.codes, self.s_k, self.s_v, self.uq = checkpoint_views(self.raw, self.num_slots, self.heads, layout)
        self.u = self.uq[..., :K]
        self.q = self.uq[..., K:]
        self.errors = torch.zeros(len(ERROR_KINDS), dtype=torch.int32, device=dev)
        self.kernel = self.step_kernel = None  # CPU: the PyTorch flush and step
        self.kernel_reason = "no CUDA device: the fp32 PyTorch paths"
        self.picks = None
        if dev.type == "cuda":
            from .kernel import choose_for_pool
            from .launch import pick_words

            self.picks = torch.empty(pick_words(self.hcnt.numel(), dev), dtype=torch.int32, device=dev)  # scratch
            self.kernel, self.step_kernel, self.kernel_reason = choose_for_pool(self)
            self._warm_up()

    @property
    def nbytes(self) -> int:
        """Bytes of every tensor this pool holds: its state (``STATE_NAMES``) and scratch."""
        own = [getattr(self, n) for n in state_names(self.family)] + [self.errors] + ([self.picks] if self.picks is not None else [])
        return sum(t.numel() * t.element_size() for t in own)

    @property
    def checkpoint(self):
        """``(codes, s_k, s_v, u, q)`` views, ``[NS, NH, ...]``."""
        return self.codes, self.s_k, self.s_v, self.u, self.q

    @property
    def window(self):
        """The family's window tensors, ``[NS, NH, ...]`` (KDA: ``(kbuf, ubuf, gbuf, w, pcum)``;
        GDN: ``(kbuf, ubuf, w, p)``)."""
        return tuple(getattr(self, n) for n in self.family.window)

    @property
    def kernel_window(self):
        """The window as the kernels take it (``family.Family.kernel_window``)."""
        return self.family.kernel_window(self.window)

    def error_counts(self) -> dict:
        """``{kind: count}`` of ``errors`` (``ERROR_KINDS``); reads the device counter (a host
        synchronisation: call it where the engine can afford one, not per token)."""
        return dict(zip(ERROR_KINDS, self.errors.tolist()))

    def check_index(self, idx: torch.Tensor) -> None:
        """Check slot ids on the host (synchronises). ``idx``: integer tensor ``[N]`` of slot
        ids (entries <= 0 are padding and may repeat), on any device.

        Raises TypeError if ``idx`` is not an integer tensor; ValueError for an id >= num_slots or a
        positive id given twice. The in-place calls trust ``idx`` and do not check its values
        (that would synchronise); call this where an engine builds ``idx``, or pass ``check=True``
        to ``write_state``.
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
        for slots in warm_up_slots(self.kernel, self.heads) if dev.type == "cuda" else [1]:
            launch_flush(self.checkpoint, self.checkpoint, self.kernel_window, q0, idx=idx.new_zeros(slots),
                         hcnt=self.hcnt, picks=self.picks, kernel=self.kernel, ctas_per_sm=self.flush_ctas_per_sm)
        fam = self.family
        launch_step(self.checkpoint, self.kernel_window, self.hcnt, empty_token(1, self.heads, dev, fam),
                    torch.zeros(self.heads, device=dev), torch.zeros(self.heads, *fam.gate_inputs["dt_bias"], device=dev),
                    torch.empty(1, self.heads, V, dtype=torch.bfloat16, device=dev), idx=idx, errors=self.errors,
                    guard_full=self.layout == "packed", key_group=fam.key_group, kernel=self.step_kernel)
        if dev.type == "cuda":  # (the interpreted tests run this on a CPU pool)
            torch.cuda.synchronize(dev)


def checkpoint_views(raw: torch.Tensor, num_slots: int, heads: int, layout: str) -> tuple:
    """``(codes, s_k, s_v, uq)``: the checkpoint views of a pool's ``raw`` in ``layout``,
    ``[NS, NH, V, K]`` int8, ``[NS, NH, K]`` and ``[NS, NH, V]`` fp32, ``[NS, NH, R, K + V]`` fp16
    (``u = uq[..., :K]``, ``q = uq[..., K:]``). Strides in elements of each dtype: a slot spans
    ``heads`` regions (packed) or ``heads + 1`` (request), a region ``REGION_WORDS`` (packed) or
    ``V * K`` words (request)."""
    if layout == "packed":
        slot_words, head_words, offset_words = heads * REGION_WORDS, REGION_WORDS, 0
    else:
        slot_words, head_words, offset_words = (heads + 1) * HEAD_WORDS, HEAD_WORDS, POOL_OFFSET_WORDS
    flat = raw.view(-1)

    def view(dtype, shape, inner_strides, byte_offset):
        size = torch.empty((), dtype=dtype).element_size()
        per_word = 4 // size
        strides = (slot_words * per_word, head_words * per_word, *inner_strides)
        typed = flat.view(dtype)  # (as_strided's offset counts from the storage's start: raw may be a view)
        return typed.as_strided(shape, strides, typed.storage_offset() + (offset_words * 4 + byte_offset) // size)

    NS, NH = num_slots, heads
    return (view(torch.int8, (NS, NH, V, K), (K, 1), CODES_BYTES), view(torch.float32, (NS, NH, K), (1,), SK_BYTES),
            view(torch.float32, (NS, NH, V), (1,), SV_BYTES), view(torch.float16, (NS, NH, R, K + V), (K + V, 1), UQ_BYTES))


def pool_checkpoint(raw: torch.Tensor, hcnt: torch.Tensor, layout: str) -> tuple:
    """``(codes, s_k, s_v, u, q)``: the checkpoint views of a pool's ``raw`` (``hcnt`` gives
    its slots and heads)."""
    codes, s_k, s_v, uq = checkpoint_views(raw, hcnt.shape[0], hcnt.shape[1], layout)
    return codes, s_k, s_v, uq[..., :K], uq[..., K:]


def empty_token(n: int, heads: int, device, family: Family = KDA) -> tuple:
    """``(qx, kx, vx, a, b)`` of ``n`` zero rows: the views of one ``mixed`` row a step takes."""
    mixed = torch.zeros(n, family.mixed_width(heads), dtype=torch.bfloat16, device=device)
    return (*split_mixed(mixed, heads, family), torch.zeros(n, heads, *family.gate_inputs["a"], dtype=torch.bfloat16,
                                                            device=device),
            torch.zeros(n, heads, dtype=torch.bfloat16, device=device))


def split_mixed(mixed: torch.Tensor, heads: int, family: Family = KDA) -> tuple:
    """``(qx, kx, vx)``: the views of ``mixed`` ``[N, family.mixed_width(heads)]`` rows ``(q | k |
    v)``, q and k of each key head (``family.key_heads(heads)``), v of each head."""
    hk = family.key_heads(heads) * K
    return mixed[:, :hk], mixed[:, hk : 2 * hk], mixed[:, 2 * hk :]


def warm_up_slots(kernel: str, heads: int = H) -> list[int]:
    """Lengths of the padding ``idx`` (ids 0: nothing due) ``Pool._warm_up`` flushes with on a
    CUDA pool whose flush kernel is ``kernel`` ("gluon" or "triton"): one a flag-scan tile its
    pool calls may use (``pool_tiles()`` of the kernel's module; the Gluon kernel picks one by
    the call's candidates, ``launch.flag_tile``), so that every build compiles with the pool."""
    from .kernel import module

    return [max(tile // heads, 1) for tile in module(kernel).pool_tiles()]


def _check_count(name: str, value) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return operator.index(value)


def _check_slots(num_slots) -> int:
    num_slots = _check_count("num_slots", num_slots)
    if num_slots < 2:
        raise ValueError(f"num_slots must be >= 2 (slot 0 is reserved), got {num_slots}")
    return num_slots


def _check_heads(heads: int, family: Family = KDA) -> None:
    if heads not in family.head_counts():
        raise ValueError(f"heads must be one of {family.head_counts()} ({family.name.upper()}), got {heads}")


def check_call(pool, idx, name: str = "idx") -> None:
    """The checks every in-place call makes on its pool and slot ids (``name`` in messages),
    without reading the ids' values (no host sync): TypeError unless ``pool`` is a ``Pool`` of
    this package and ``idx`` an int32 tensor; ValueError unless ``idx`` is 1-D, contiguous and on
    the pool's device."""
    if not isinstance(pool, Pool):
        raise TypeError(f"pool must be a {Pool.__module__}.Pool, got {type(pool).__module__}.{type(pool).__qualname__}"
                        " (a Pool of another copy of the package?)")
    check_index_tensor(name, idx, pool)


def check_index_tensor(name: str, idx, pool: Pool) -> None:
    """TypeError unless ``idx`` is an int32 tensor; ValueError unless it is 1-D, contiguous and
    on the pool's device."""
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(idx).__name__}")
    if idx.dtype != torch.int32:
        raise TypeError(f"{name} must have dtype torch.int32, got {idx.dtype}")
    if idx.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {list(idx.shape)}")
    if idx.device != pool.device:
        raise ValueError(f"{name} is on {idx.device}, but the pool is on {pool.device}")
    if not idx.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def check_on_pool(name: str, t, dtype: torch.dtype, shape: tuple[int, ...], pool: Pool, dense: bool = True) -> None:
    """TypeError unless ``t`` is a ``dtype`` tensor; ValueError unless it has ``shape``, lies on
    the pool's device and (``dense``) is contiguous."""
    check_spec(name, t, dtype, shape, pool.device, "the pool", dense)


def check_spec(name: str, t, dtype: torch.dtype, shape: tuple[int, ...], device: torch.device, owner: str,
               dense: bool = True) -> None:
    """TypeError unless ``t`` is a ``dtype`` tensor; ValueError unless it has ``shape``, lies on
    ``device`` (``owner``'s, named in the message) and (``dense``) is contiguous."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, but {owner} is on {device}")
    if dense and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
