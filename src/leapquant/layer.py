"""One call per KDA layer and token for engines: ``decode_inplace`` runs the decode step now and
the flush of the windows it fills off the critical path, on the side streams of an ``Overlap``
scope the engine opens around its forward.

The flush of layer l is needed by nothing but layer l's next step, one token later; in between
run the other layers' steps and the rest of the model. Inside a scope, each call forks the
previous call's flush onto one of the scope's side streams (after that call's step) and runs its
own step on the current stream; the scope's exit joins the side streams into the current one, as a
CUDA-graph capture requires, and defers the last call's flush to the next scope's entry, so that
no flush is exposed at a token's end. Events only: no host synchronisation, nothing allocated
after the first token but a grouped flush's ids (``Overlap(group=...)``: a few bytes a layer on
the side stream, from the caching allocator), capturable (one graph per batch size covering the
scope).

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush and
conless-leapquant-kda-step.
"""

from __future__ import annotations

import copy

import torch

from .format import check_q0
from .geometry import L
from .launch import MOST_CTAS_PER_SM, resident_ctas
from .interface import check_step_call, flush_checked, step_checked
from .pool import Pool

FLUSH_STREAMS = 2  # side streams of an Overlap scope
# calls of fewer sequences than this spread their flushes over the side streams in turn; larger
# ones keep to the first. Engine loop, H100, 2026-12-06 (ms a token and layer, 1 side stream / 2):
# B=16 0.0242 / 0.0171, B=64 0.0395 / 0.0433, B=256 0.1287 / 0.1330, B=512 0.2396 / 0.2453
SPREAD_BELOW = 64
# layers a flush launch when the scope chooses (``Overlap(group=None)``, ``flush_group``). Engine loop,
# H100, 2026-12-07, KDA, ms a token and layer, group 1 / 4 (with a bf16 matmul a layer): B=16 0.0160
# / 0.0144 (0.0599 / 0.0569), B=64 0.0394 / 0.0441 (0.0871 / 0.0849), B=256 0.1284 / 0.1276
# (0.1915 / 0.1772); docs/design.md, "Flushes grouped across layers"
FLUSH_GROUP = 4

class Overlap:
    """The scope of one token's forward in which ``decode_inplace`` calls overlap their flushes
    with the work that follows them.

    ``with overlap:`` around every layer's ``decode_inplace(..., overlap=overlap)`` of a token;
    create it once (it holds the side streams and their events) and open it every token, eagerly
    or inside a CUDA-graph capture. On entry the last call of the previous scope flushes its
    sequences' full windows (on a side stream, beside this token's first layers); on exit the
    side streams rejoin the current one. Between scopes the windows the last call filled stay
    full: ``read_state`` reads them whole; ``close()`` flushes them now (before stepping that pool
    without a scope, copying its slots with ``copy_slots`` or dropping the scope).

    Args:
        device: the CUDA device of the pools.
        streams: side streams the flushes take in turn (1 or more). At small batch a flush lasts
            longer than the next layer's step (its latency, not its bytes), so with one stream the
            flushes queue behind each other; with several, consecutive layers' flushes overlap.
        spread_below: calls of fewer sequences than this take the side streams in turn; calls of
            more take the first only (there the flushes are bandwidth- and SM-bound, and two at
            once slow the steps beside them more than they gain; measured, ``SPREAD_BELOW``).

        group: consecutive calls whose flushes run as one launch (1: each call its own; None, the
            default: ``flush_group`` of the calls' size, at most half the stack's layers). Grouped
            calls are those on the layers of one ``Pool.layers`` stack, in order, with the same
            ``idx`` and ``q0`` tensors (pools made apart never group); a group is forked when it
            is full or the next call cannot join it. One launch pays the flush's fixed cost (the
            first fetch of its code, the flag scan) once for the group instead of once a layer.

    One ``Pool`` per layer, as engines allocate state: a call waits for its pool's flush forked
    earlier in the scope, so two layers on one pool would run one after the other.

    On a device other than CUDA the scope holds no streams and each call runs its step and its
    flush in turn (the same code serves both).

    A scope captured in a CUDA graph must follow an eager token of the same calls (as engines warm
    up): the previous token's deferred flushes are forked at its entry, inside the graph.

    The deferred flushes read their ``idx`` tensor when they run, at the next scope's entry: an
    engine that writes the next token's ids into the same buffer (a graph's static input) has
    them flush the due windows of the sequences still in the batch. A sequence that leaves the
    batch with its window full keeps it: ``read_state`` reads it whole, and before that slot is
    stepped again ``flush_inplace`` on it (or ``close()``) empties it; in the packed layout a step
    on a full window never flushed keeps the window, appends nothing and counts in ``pool.errors``.

    Raises: RuntimeError when a scope is opened twice or captured without that eager token;
    ValueError for ``streams < 1``, ``group < 1`` or a CUDA device without CUDA.
    """

    def __init__(self, device="cuda", streams: int = FLUSH_STREAMS, spread_below: int = SPREAD_BELOW,
                 group: int | None = None):
        device = torch.device(device)
        if streams < 1 or (group is not None and group < 1):
            raise ValueError(f"streams and group must be at least 1, got {streams} and {group}")
        self.device, self.spread_below, self.group = device, spread_below, group
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device is cuda, but CUDA is not available: pass device='cpu'")
        self.sides = [torch.cuda.Stream(device) for _ in range(streams)] if device.type == "cuda" else []
        self._turn = 0
        self._events: list[torch.cuda.Event] = []  # made once, reused every token in the same order
        self._used = 0
        self._open = False
        self._forked: list = []  # side streams this scope forked onto
        self._pending = []  # [(pool, idx, q0)]: the last calls' flushes, not forked yet (one group)
        self._deferred = []  # the previous scope's last group
        self._inflight: dict[int, torch.cuda.Event] = {}  # id(pool) -> its flush's end, this scope

    def __enter__(self) -> "Overlap":
        if self._open:
            raise RuntimeError("this Overlap scope is already open")
        self._open, self._used, self._inflight, self._turn, self._forked = True, 0, {}, 0, []
        self._entered_with_deferred = bool(self._deferred)
        if self._deferred:
            deferred, self._deferred = self._deferred, []
            self._fork(deferred)
        return self

    def __exit__(self, *exc) -> None:
        self._open = False
        if not self.sides:
            return
        if self._pending and not self._entered_with_deferred and torch.cuda.is_current_stream_capturing():
            # the graph would hold no flush of the calls this scope defers: every replay would
            # leave their windows full (the previous token's deferred flushes belong in the graph)
            self._pending = []
            raise RuntimeError("an Overlap scope captured in a CUDA graph must follow an eager token of the "
                               "same calls (its deferred flushes are forked at the captured scope's entry)")
        self._deferred, self._pending = self._pending, []
        main = torch.cuda.current_stream(self.device)
        for side in self._forked:  # every fork rejoins (only streams this scope used: a capture
            main.wait_stream(side)  # cannot wait on a stream it never forked)

    def close(self) -> None:
        """Flush now, on the current stream, what the last scope deferred (no-op if nothing)."""
        deferred, self._deferred = self._deferred, []
        for call in deferred:
            flush_checked(*call)

    def _event(self) -> torch.cuda.Event:
        if self._used == len(self._events):
            self._events.append(torch.cuda.Event())
        self._used += 1
        return self._events[self._used - 1]

    def _fork(self, calls: list) -> None:
        # the calls' flushes (one group) on the next side stream, after everything issued so far
        # on the current one: one launch on their stack, or the one call's own
        main = torch.cuda.current_stream(self.device)
        pool, idx, q0 = calls[0]
        side = self.sides[self._turn % len(self.sides) if idx.shape[0] < self.spread_below else 0]
        self._turn += 1
        if side not in self._forked:
            self._forked.append(side)
        start = self._event()
        start.record(main)
        side.wait_event(start)
        with torch.cuda.stream(side):
            if len(calls) == 1:
                flush_checked(pool, idx, q0)
            else:  # one launch on the stack: each layer's ids moved to its part of it
                flush_checked(self._stack_on(pool.stack, side), pool.stack_ids(idx, len(calls)), q0)
        if not torch.cuda.is_current_stream_capturing():
            # eagerly an engine may drop idx and q0 once it has made the calls: their blocks must
            # not go to work on the current stream before this side stream has read them (the
            # deferred flush reads them during the next token). Under capture they are the
            # graph's inputs, which the engine keeps as long as the graph (as for every kernel).
            idx.record_stream(side)
            q0.record_stream(side)
        done = self._event()
        done.record(side)
        for call in calls:
            self._inflight[id(call[0])] = done

    @staticmethod
    def _stack_on(stack: Pool, side: torch.cuda.Stream) -> Pool:
        # the stack with flush scratch (``picks``) of this side stream's own: two group launches
        # on one stack may run at once on two side streams, and the scratch is per launch. Kept
        # on the stack (``side_scratch``: it lives and dies with it), made on the stream's first group.
        if side not in stack.side_scratch:
            twin = copy.copy(stack)
            twin.picks = torch.empty_like(stack.picks)
            stack.side_scratch[side] = twin
        return stack.side_scratch[side]

    def _joins(self, pool: Pool, idx: torch.Tensor, q0: torch.Tensor) -> bool:
        # whether this call's flush can join the pending group: the next layer of the same stack,
        # the same ids and test vectors, room left
        if not self._pending:
            return False
        first, first_idx, _ = self._pending[0]
        # the scope's own choice: at most half the stack, so that the group deferred to the next
        # token never holds its first layers (their steps would wait for it at once)
        limit = self.group or min(flush_group(first_idx.shape[0], first.heads, self.device),
                                  max(1, first.stack.layer_offsets.numel() // 2) if first.stack is not None else 1)
        if len(self._pending) >= limit:
            return False
        last, last_idx, last_q0 = self._pending[-1]
        return (pool.stack is not None and pool.stack is last.stack and pool.stack_layer == last.stack_layer + 1
                and idx is last_idx and q0 is last_q0)

    def _step(self, pool: Pool, idx, q0, step) -> None:
        if not self._open:
            raise RuntimeError("decode_inplace(..., overlap=scope) outside `with scope:`")
        if not self.sides:  # not CUDA: in turn
            step()
            flush_checked(pool, idx, q0)
            return
        main = torch.cuda.current_stream(self.device)
        if self._pending and not self._joins(pool, idx, q0):
            self._fork(self._pending)  # (a pool already pending never joins: it forks here)
            self._pending = []
        done = self._inflight.pop(id(pool), None)
        if done is not None:  # this pool's flush, forked in this scope, before its step
            main.wait_event(done)
        step()
        self._pending.append((pool, idx, q0))


def flush_group(num_seqs: int, heads: int, device) -> int:
    """Layers a flush launch for calls of ``num_seqs`` sequences of ``heads`` heads on ``device``
    (what ``Overlap(group=None)`` uses): ``FLUSH_GROUP`` where a group's due programs (about
    ``num_seqs * heads / L`` a layer, the windows staggered) fit one CTA an SM beside the steps,
    or where one layer's already take every resident CTA of the flush's grid; else 1. Between
    the two, a group turns a flush that leaves half of each SM to the steps into one that holds
    every SM's shared memory for a whole wave (measured at B=64: +12%, ``FLUSH_GROUP``'s
    comment). SMs: the device's multiprocessors (132 off CUDA)."""
    device = torch.device(device)
    sms = resident_ctas(device, 1) if device.type == "cuda" else 132  # (cached: no query a call)
    due = num_seqs * heads / L
    return FLUSH_GROUP if due * FLUSH_GROUP <= sms or due >= MOST_CTAS_PER_SM * sms else 1


def decode_inplace(pool: Pool, idx: torch.Tensor, mixed: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                   A_log: torch.Tensor, dt_bias: torch.Tensor, o: torch.Tensor, q0: torch.Tensor,
                   overlap: Overlap | None = None) -> None:
    """One KDA layer's state work for one token: the decode step of the sequences ``idx``
    (``step_inplace``: output into ``o``, entry appended) and the flush of the windows that fill
    (``flush_inplace``).

    Without ``overlap`` (eager engines, piecewise graphs): the step, then the flush, on the
    current stream. With an open ``Overlap`` scope: the step on the current stream now, and this
    call's flush forked onto a side stream of the scope when the next call in the scope comes (after
    this step), or deferred to the next scope (the last call of a token), so that it runs beside
    the model's other work. Either way no host synchronisation, nothing allocated (after a
    scope's first token; a grouped flush's ids aside), capturable in a CUDA graph; the arguments and their errors are those of
    ``step_inplace`` and ``flush_inplace``.

    Args (``N = len(idx)``, ``NH = pool.heads``): ``pool``, ``idx``, ``mixed``, ``a``, ``b``,
    ``A_log``, ``dt_bias``, ``o`` as ``step_inplace``; ``q0`` fp32 ``[V, R]`` as
    ``flush_inplace``; ``overlap``: an ``Overlap`` scope, open.

    Raises: as ``step_inplace`` and ``flush_inplace``; RuntimeError for a scope that is not open.
    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-step and
    conless-leapquant-kda-flush.
    """
    check_step_call(pool, idx, mixed, a, b, A_log, dt_bias, o)  # every argument before any work:
    check_q0(q0, pool.device)  # the flush may run later, the previous call's is forked first
    if overlap is None:
        step_checked(pool, idx, mixed, a, b, A_log, dt_bias, o)
        flush_checked(pool, idx, q0)
        return
    overlap._step(pool, idx, q0, lambda: step_checked(pool, idx, mixed, a, b, A_log, dt_bias, o))
