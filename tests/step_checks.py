"""Checks of the decode step shared by the interpreted (CPU), CPU-engine and CUDA tests; each
returns plain verdicts (JSON-serialisable)."""

from __future__ import annotations

import torch

from leapquant.eval import step_criterion, step_inputs
from leapquant.format import CHECKPOINT_FIELDS, WINDOW_FIELDS
from leapquant.geometry import H, K, L, V
from leapquant.pool import Pool

CKPT = tuple(CHECKPOINT_FIELDS)
WIN = tuple(WINDOW_FIELDS)
POOL_TENSORS = ("raw", "kbuf", "ubuf", "gbuf", "w", "pcum", "hcnt")


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN patterns compare equal to themselves)."""
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    dt = ints[a.element_size()]
    return a.shape == b.shape and torch.equal(a.contiguous().view(dt), b.contiguous().view(dt))


def poisoned_outputs(x: dict):
    """Output tensors of the functional form filled with NaN (a store that is skipped shows)."""
    nan = float("nan")
    return (torch.full_like(x["vx"], nan), torch.full_like(x["kx"], nan), torch.full_like(x["vx"], nan),
            torch.full_like(x["kx"], nan, dtype=torch.float16), torch.full_like(x["w"], nan),
            torch.full_like(x["pcum"], nan))


def functional(family: str, B: int, device, run, seed: int = 11) -> dict:
    """``run(x, outs)`` writes the step of the inputs ``x`` into the six tensors ``outs``; judged
    by the criterion; the inputs must come back bit-identical."""
    x = step_inputs.make(family, B, device, seed)
    copies = {n: t.clone() for n, t in x.items()}
    outs = poisoned_outputs(x)
    run(x, outs)
    ok, worst = step_criterion.judge(outs, x)
    by = step_criterion.worst_by_output(outs, x)
    return {"ok": ok, "worst": worst, "by_output": by,
            "inputs_unchanged": all(same_bits(x[n], copies[n]) for n in x)}


def dead_rows_unused(device, run, family: str = "random", seed: int = 13) -> dict:
    """The functional step, ``run(x, outs)`` as in ``functional``, on one sequence whose heads sit
    at every fill count (head i at i mod (L + 1); L reads as 0), once as made and once with NaN in
    every kbuf, ubuf, gbuf and w row at or past the fill count: the outputs must be bit-identical
    (``w_new`` on its rows up to h; past h it carries the input's w) and finite. The kernels keep
    no select over kbuf and ubuf rows, so one of those rows read by mistake reaches the outputs
    and fails this; a gbuf row read past h does not (``entry_decay`` turns those rows into ones),
    nor does any read whose value a select discards: this pins what reaches the outputs, not what
    is read."""
    x = step_inputs.make(family, 1, device, seed)
    x["h"] = (torch.arange(H, device=device) % (L + 1)).to(torch.int32)[None, :]
    h = torch.where(x["h"] >= L, 0, x["h"])
    dead = torch.arange(L, device=device) >= h[..., None]  # [1, H, L]
    poisoned = dict(x)
    for name in ("kbuf", "ubuf", "gbuf", "w"):
        poisoned[name] = x[name].clone()
        poisoned[name][dead] = float("nan")
    clean, dirty = poisoned_outputs(x), poisoned_outputs(x)
    run(x, clean)
    run(poisoned, dirty)
    upto_h = torch.arange(L, device=device) <= h[..., None]  # w_new's rows that the step sets or keeps
    same = all(same_bits(a, b) for k, (a, b) in enumerate(zip(clean, dirty)) if k != 4)
    same &= same_bits(clean[4][upto_h], dirty[4][upto_h])
    return {"same": same, "finite": all(bool(torch.isfinite(t.float()).all()) for t in clean)}


def kernel_functional(x: dict, outs, kernel: str = "triton") -> None:
    """The step of ``x`` by the kernel named ``kernel`` (``"triton"`` or ``"gluon"``), functional form."""
    from leapquant.kernel import launch_step

    o, *new = outs
    launch_step(tuple(x[n] for n in CKPT), tuple(x[n] for n in WIN), x["h"],
                tuple(x[n] for n in step_inputs.TOKEN_ARGS), x["A_log"], x["dt_bias"], o, new=tuple(new),
                kernel=kernel)


def kernel_inplace(pool, idx, mixed, a, b, A_log, dt_bias, o, kernel: str = "triton") -> None:
    """``step_inplace`` through the kernel named ``kernel`` (on a CPU pool: under the interpreter)."""
    from leapquant.ops import step_pool

    step_pool(pool.raw, *pool.window, pool.hcnt, pool.errors, idx, mixed, a, b, A_log, dt_bias, o, pool.layout, kernel)


def all_bf16(limit: float = 80.0) -> torch.Tensor:
    """Every finite bf16 value with |b| < limit (the domain of beta's pre-activation)."""
    b = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    return b[torch.isfinite(b.float()) & (b.float().abs() < limit)].contiguous()


def kernel_beta_disagreements(device) -> int:
    """Bf16 inputs whose beta from the kernels' ``beta_bf16`` differs from ``sigmoid(b)`` correctly
    rounded to bf16 (``naive.beta_bf16``), over every bf16 b with |b| < 80."""
    from step_beta_kernel import betas_kernel

    from leapquant.step.naive import beta_bf16
    from leapquant.step.tl_common import BETA_SERIES_BELOW

    b = all_bf16()
    n = 1 << 16
    padded = torch.zeros(n, dtype=torch.bfloat16, device=device)
    padded[: b.numel()] = b.to(device)
    got = torch.empty(n, dtype=torch.float32, device=device)
    block = n if device == "cpu" else 1024  # one interpreted program, or many small ones
    betas_kernel[(n // block,)](padded, got, SMALL=BETA_SERIES_BELOW, N=block)
    return int((got[: b.numel()].double().cpu() != beta_bf16(b)).sum())


def run_without_sync(calls) -> None:
    """Each of ``calls`` (no arguments) under ``torch.cuda.set_sync_debug_mode("error")``: a host
    synchronisation in any raises."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for call in calls:
            call()
    finally:
        torch.cuda.set_sync_debug_mode(0)


def mixed_rows(x: dict) -> torch.Tensor:
    """The ``(q | k | v)`` rows of the tokens in ``x``: bf16 ``[B, 2 H K + H V]``."""
    B = x["qx"].shape[0]
    return torch.cat([x["qx"].reshape(B, -1), x["kx"].reshape(B, -1), x["vx"].reshape(B, -1)], -1)


def snapshot(pool: Pool) -> dict:
    return {n: getattr(pool, n).clone() for n in POOL_TENSORS}


def poison_slot_zero(pool, names) -> None:
    """NaN in slot 0 of each named pool tensor that can hold one: the slot a row of ids <= 0
    names, which a step must neither read into any output nor write."""
    for name in names:
        if getattr(pool, name).is_floating_point():
            getattr(pool, name)[0] = float("nan")


def stepped_pool(device, family: str = "random", seed: int = 21):
    """A 6-slot pool whose slots 1..5 hold ``family``'s checkpoints and windows (slot 0 NaN where
    it can be), with slot 2's even heads at ``hcnt == L`` (just flushed: w = 0, gbuf = 1,
    pcum = 0), slot 3's heads all at ``L - 1``; and a call ``idx = [3, 0, 1, -1, 2, 5]`` (slot 4
    left out) with its tokens (junk on the rows of ids <= 0). Returns ``(pool, idx, mixed, a, b,
    A_log, dt_bias)``."""
    x = step_inputs.make(family, 5, device, seed)
    pool = Pool(6, device)
    for name in CKPT + WIN:
        getattr(pool, name)[1:] = x[name]
    pool.hcnt[1:] = x["h"]
    pool.hcnt[2, ::2] = L
    pool.w[2, ::2] = 0
    pool.gbuf[2, ::2] = 1
    pool.pcum[2, ::2] = 0
    pool.hcnt[3] = L - 1
    poison_slot_zero(pool, CKPT + WIN)
    idx = torch.tensor([3, 0, 1, -1, 2, 5], dtype=torch.int32, device=device)
    tok = step_inputs.tokens(6, device, seed + 1)  # row i: the token of sequence idx[i]
    return pool, idx, mixed_rows(tok), tok["a"], tok["b"], x["A_log"], x["dt_bias"]


def pool_form(device, run, family: str = "random", seed: int = 21) -> dict:
    """Run ``run(pool, idx, mixed, a, b, A_log, dt_bias, o)`` on ``stepped_pool`` and check: zero
    output rows for ids <= 0; the live programs' outputs and appended entries against the
    criterion, with ``hcnt == L`` read as 0; ``hcnt = h + 1``; every other byte unchanged."""
    pool, idx, mixed, a, b, A_log, dt_bias = stepped_pool(device, family, seed)
    before = snapshot(pool)
    o = torch.full((idx.numel(), H, V), float("nan"), dtype=torch.bfloat16, device=device)
    run(pool, idx, mixed, a, b, A_log, dt_bias, o)
    live = idx > 0
    rows = live.nonzero().squeeze(1)
    slots = idx[rows].long()
    zero_rows = bool((o[~live] == 0).all())
    # the inputs each live program saw, from the pool as it was
    h = before["hcnt"][slots]
    h = torch.where(h >= L, torch.zeros_like(h), h)
    old = dict(zip(CKPT, _views(pool, before["raw"])))
    inp = {n: old[n][slots] for n in CKPT}
    inp.update({n: before[n][slots] for n in WIN})
    inp["h"] = h
    n = rows.numel()
    inp.update(qx=mixed[rows, : H * K].reshape(n, H, K), kx=mixed[rows, H * K : 2 * H * K].reshape(n, H, K),
               vx=mixed[rows, 2 * H * K :].reshape(n, H, V), a=a[rows], b=b[rows], A_log=A_log, dt_bias=dt_bias)
    s = slots[:, None].expand(n, H)
    hd = torch.arange(H, device=device)[None, :].expand(n, H)
    e = h.long()
    got = (o[rows], pool.kbuf[s, hd, e], pool.ubuf[s, hd, e], pool.gbuf[s, hd, e], pool.w[slots], pool.pcum[slots])
    ok, worst = step_criterion.judge(got, inp)
    advanced = bool((pool.hcnt[slots] == h + 1).all())
    # everything but the appended entries and the live programs' pcum and hcnt stays bit-identical
    touched = torch.zeros(pool.num_slots, H, L, dtype=torch.bool, device=device)
    touched[s, hd, e] = True
    untouched = same_bits(pool.raw, before["raw"])
    for name in ("kbuf", "ubuf", "gbuf", "w"):
        untouched &= same_bits(getattr(pool, name)[~touched], before[name][~touched])
    other = torch.ones(pool.num_slots, dtype=torch.bool, device=device)
    other[slots] = False
    for name in ("pcum", "hcnt"):
        untouched &= same_bits(getattr(pool, name)[other], before[name][other])
    flushed = bool((before["hcnt"][2, ::2] == L).all() and (pool.hcnt[2, ::2] == 1).all())
    return {"ok": ok, "worst": worst, "zero_rows": zero_rows, "advanced": advanced, "untouched": untouched,
            "flushed_read_as_empty": flushed}


def _views(pool: Pool, raw):
    """The checkpoint views of ``pool`` laid over another raw buffer."""
    return tuple(raw.view(v.dtype).as_strided(v.shape, v.stride(), v.storage_offset()) for v in pool.checkpoint)


def full_window_kept(device, run, heads: int = H, seed: int = 31) -> dict:
    """``run(pool, idx, mixed, a, b, A_log, dt_bias, o)`` on a packed pool whose programs all hold
    a full window that was never flushed (``hcnt == L``, ``w[L - 1] = 1``): every pool tensor must
    stay bit-identical, ``errors[0]`` count every program once, and ``o`` meet the step's
    criterion for the whole window (``h = L``; worst error / tolerance in ``o_worst``)."""
    x = step_inputs.make("random", 3, device, seed)
    pool = Pool(4, device, heads=heads)
    for name in CKPT + WIN:
        getattr(pool, name)[1:] = x[name][:, :heads]
    pool.hcnt.fill_(L)
    pool.w[:, :, L - 1] = 1  # slot 0 too: the padding row must neither count it nor write to it
    idx = torch.tensor([2, 0, 3, 1], dtype=torch.int32, device=device)
    tok = step_inputs.tokens(4, device, seed + 1)
    tok = {n: t[:, :heads].contiguous() for n, t in tok.items()}
    before = snapshot(pool)
    o = torch.full((4, heads, V), float("nan"), dtype=torch.bfloat16, device=device)
    A_log, dt_bias = x["A_log"][:heads].contiguous(), x["dt_bias"][:heads].contiguous()
    run(pool, idx, mixed_rows(tok), tok["a"], tok["b"], A_log, dt_bias, o)
    kept = all(same_bits(getattr(pool, n), before[n]) for n in POOL_TENSORS)
    rows = torch.tensor([0, 2, 3], device=device)
    slots = idx[rows].long()
    inp = {n: v[slots] for n, v in zip(CKPT + WIN, pool.checkpoint + pool.window)}
    inp.update({n: tok[n][rows] for n in step_inputs.TOKEN_ARGS}, A_log=A_log, dt_bias=dt_bias,
               h=torch.full((3, heads), L, dtype=torch.int32, device=device))
    ex = step_criterion.exact(inp)
    rest = (ex["k_row"].bfloat16(), ex["u_row"].bfloat16(), ex["g_row"].half(), ex["w_new"].float(),
            ex["pcum_new"].float())
    o_worst = float(step_criterion.ratios((o[rows], *rest), inp)["o"].max())
    return {"kept": kept, "counted": int(pool.errors[0]) == 3 * heads and int(pool.errors[1]) == 0,
            "zero_row": bool((o[1] == 0).all()), "o_worst": o_worst}
