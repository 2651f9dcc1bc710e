"""Checks of the GDN (Gated DeltaNet) flush and step shared by the CPU, interpreted (CPU) and CUDA
tests; each returns plain verdicts (JSON-serialisable)."""

from __future__ import annotations

import torch

from leapquant import gdn
from leapquant.eval import flush_inputs, gdn_criterion, gdn_inputs, step_inputs
from leapquant.family import GDN
from leapquant.geometry import ERROR_KINDS, H, K, L, V
from step_checks import poison_slot_zero, same_bits

CKPT = gdn_inputs.CHECKPOINT_ARGS  # codes, s_k, s_v, u, q
WIN = gdn_inputs.WINDOW_ARGS  # kbuf, ubuf, w, p
POOL_TENSORS = ("raw", "kbuf", "ubuf", "w", "p", "hcnt")
FULL, OUT = ERROR_KINDS.index("full_window"), ERROR_KINDS.index("out_of_domain")


# --- the functional forms -------------------------------------------------------------------


def poisoned_step_outputs(x: dict) -> tuple:
    """``(o, k_row, u_row, w_new, p_new)`` of the step of ``x`` filled with NaN (a skipped store shows)."""
    nan = float("nan")
    B, heads = x["h"].shape
    return (torch.full_like(x["vx"], nan), torch.full((B, heads, K), nan, dtype=torch.bfloat16, device=x["vx"].device),
            torch.full_like(x["vx"], nan), torch.full_like(x["w"], nan), torch.full_like(x["p"], nan))


def kernel_step(x: dict, kernel: str = "triton") -> tuple:
    """The GDN step of the inputs ``x`` (``gdn_inputs.STEP_ARGS``) by ``leapquant.kernel.launch_step``
    with ``kernel``, functional form, into poisoned outputs: ``(o, k_row, u_row, w_new, p_new)``."""
    from leapquant.kernel import launch_step

    o, k_row, u_row, w_new, p_new = outs = poisoned_step_outputs(x)
    launch_step(tuple(x[n] for n in CKPT), GDN.kernel_window(x), x["h"], tuple(x[n] for n in gdn_inputs.TOKEN_ARGS),
                x["A_log"], x["dt_bias"], o, new=(k_row, u_row, None, w_new, p_new), key_group=GDN.key_group,
                kernel=kernel)
    return outs


def kernel_flush(x: dict, kernel: str = "triton") -> tuple:
    """The GDN flush of the inputs ``x`` (``gdn_inputs.FLUSH_ARGS``) by ``leapquant.kernel.launch_flush``
    with ``kernel``, functional form, into poisoned outputs (-128 is no valid code, NaN no valid
    scale or token): the new checkpoint."""
    from leapquant.kernel import launch_flush

    ckpt = tuple(x[n] for n in CKPT)
    new = tuple(torch.full_like(t, -128) if t.dtype == torch.int8 else torch.full_like(t, float("nan")) for t in ckpt)
    launch_flush(ckpt, new, GDN.kernel_window(x), x["q0"], kernel=kernel)
    return new


def functional_step(family: str, B: int, device, run, seed: int = 11, heads: int = H) -> dict:
    """``run(x)`` -> ``(o, k_row, u_row, w_new, p_new)`` on the GDN step family ``family``, judged
    against ``gdn.step_reference`` (``gdn_criterion.judge_step``); the inputs must come back
    bit-identical."""
    x = gdn_inputs.make_step(family, B, device, seed, heads)
    copies = {n: t.clone() for n, t in x.items()}
    out = run(x)
    ref = gdn.step_reference(**x)
    ok, worst = gdn_criterion.judge_step(out, ref)
    return {"ok": ok, "worst": worst, "by_output": gdn_criterion.worst_by_output(out, ref),
            "inputs_unchanged": all(same_bits(x[n], copies[n]) for n in x)}


def functional_flush(family: str, B: int, device, flush, seed: int = 11, heads: int = H) -> dict:
    """``flush(x)`` -> a checkpoint on the GDN flush family ``family``, judged against
    ``gdn.reference`` (``gdn_criterion.evaluate_flush``); the inputs must come back bit-identical.
    ``head``/``batch_head``: the worst ratio to the reference's error (NaN where every head is
    under the cap); ``cap``: the worst err / (1e-3 mean|S|) on capped heads."""
    x = gdn_inputs.make_flush(family, B, device, seed, heads)
    copies = {n: t.clone() for n, t in x.items()}
    got = flush(x)
    res = gdn_criterion.evaluate_flush(x, got, flush_inputs.chunked(gdn.reference, x))
    return {"ok": res["ok"], "head": res["head"].worst_ratio, "batch_head": res["batch_head"].worst_ratio,
            "cap": res["batch_head"].worst_cap_ratio, "well_formed": res["well_formed"],
            "inputs_unchanged": all(same_bits(x[n], copies[n]) for n in x)}


def dead_rows_unused(device, run, heads: int = H, seed: int = 13) -> dict:
    """``run(x)`` (a functional step, as ``functional_step``'s) on one sequence of the random family
    whose heads sit at every fill count 0 .. L - 1, once as made and once with NaN in every kbuf,
    ubuf and w row at or past the fill count: the outputs must be bit-identical (``w_new`` on its
    rows up to ``h``; past ``h`` it carries the input's ``w``) and finite."""
    x = gdn_inputs.make_step("random", 1, device, seed, heads)
    x["h"] = (torch.arange(heads, device=device) % L).to(torch.int32)[None, :]
    dead = torch.arange(L, device=device) >= x["h"][..., None]  # [1, heads, L]
    poisoned = dict(x)
    for name in ("kbuf", "ubuf", "w"):
        poisoned[name] = x[name].clone()
        poisoned[name][dead] = float("nan")
    clean, dirty = run(x), run(poisoned)
    upto_h = torch.arange(L, device=device) <= x["h"][..., None]
    same = all(same_bits(a, b) for k, (a, b) in enumerate(zip(clean, dirty)) if k != 3)
    same &= same_bits(clean[3][upto_h], dirty[3][upto_h])
    return {"same": same, "finite": all(bool(torch.isfinite(t.float()).all()) for t in clean)}


# --- pools ----------------------------------------------------------------------------------


def tokens(n: int, device, seed: int, heads: int = H) -> dict:
    """GDN tokens of ``n`` rows (KDA's ``step_inputs.tokens`` made GDN's, first ``heads`` heads):
    ``qx, kx`` bf16 ``[n, heads / 2, K]``, ``vx`` bf16 ``[n, heads, V]``, ``a, b`` bf16 ``[n, heads]``."""
    t = gdn_inputs.from_kda_token(step_inputs.tokens(n, device, seed))
    hk = GDN.key_heads(heads)
    return {"qx": t["qx"][:, :hk].contiguous(), "kx": t["kx"][:, :hk].contiguous(),
            "vx": t["vx"][:, :heads].contiguous(), "a": t["a"][:, :heads].contiguous(),
            "b": t["b"][:, :heads].contiguous()}


def mixed_rows(t: dict) -> torch.Tensor:
    """The ``(q | k | v)`` rows of GDN tokens ``t``: bf16 ``[n, 2 (heads / 2) K + heads V]``."""
    n = t["qx"].shape[0]
    return torch.cat([t["qx"].reshape(n, -1), t["kx"].reshape(n, -1), t["vx"].reshape(n, -1)], -1)


def snapshot(pool) -> dict:
    return {n: getattr(pool, n).clone() for n in POOL_TENSORS}


def copy_pool(pool, device):
    """A new GDN pool on ``device`` holding ``pool``'s state bit for bit (same slots, heads, layout)."""
    other = gdn.Pool(pool.num_slots, device, heads=pool.heads, layout=pool.layout)
    for n in POOL_TENSORS:
        getattr(other, n).copy_(getattr(pool, n))
    return other


def views(pool, raw) -> tuple:
    """The checkpoint views of ``pool`` laid over another raw buffer (a snapshot's)."""
    return tuple(raw.view(v.dtype).as_strided(v.shape, v.stride(), v.storage_offset()) for v in pool.checkpoint)


def stepped_pool(heads: int = H, family: str = "random", seed: int = 21):
    """A 6-slot CPU GDN pool whose slots 1..5 hold ``family``'s step checkpoints and windows (slot 0
    NaN where it can be), with slot 2's even heads just flushed (``hcnt == L``, ``w = 0``,
    ``p = 1``) and slot 3's heads all at ``L - 1``; and a call ``idx = [3, 0, 1, -1, 2, 5]`` (slot 4
    left out) with its tokens (junk on the rows of ids <= 0). Returns ``(pool, idx, mixed, a, b,
    A_log, dt_bias)``, CPU tensors."""
    x = gdn_inputs.make_step(family, 5, "cpu", seed, heads)
    pool = gdn.Pool(6, "cpu", heads=heads)
    for name in CKPT + WIN:
        getattr(pool, name)[1:] = x[name]
    pool.hcnt[1:] = x["h"]
    pool.hcnt[2, ::2] = L
    pool.w[2, ::2] = 0
    pool.p[2, ::2] = 1
    pool.hcnt[3] = L - 1
    poison_slot_zero(pool, CKPT + WIN)
    idx = torch.tensor([3, 0, 1, -1, 2, 5], dtype=torch.int32)
    t = tokens(idx.numel(), "cpu", seed + 1, heads)
    return pool, idx, mixed_rows(t), t["a"], t["b"], x["A_log"], x["dt_bias"]


def _to(device, *ts):
    return tuple(t.to(device) for t in ts)


def pool_step_form(device, run, heads: int = H, family: str = "random", seed: int = 21) -> dict:
    """``run(pool, idx, mixed, a, b, A_log, dt_bias, o)`` on ``stepped_pool`` moved to ``device``,
    against the CPU pool path (``gdn.step_inplace`` on a CPU copy) and the fp32 reference on the
    inputs each live program saw (``hcnt == L`` read as 0). Verdicts: the live programs' outputs and
    appended entries (``o``, ``kbuf``/``ubuf`` row ``h``, ``w``, ``p``) meet ``judge_step`` against
    the reference (``worst``) and against the CPU pool (``worst_vs_cpu``); ``zero_rows`` for ids <=
    0; ``hcnt`` as the CPU pool's and ``h + 1``; every other byte unchanged."""
    cpu_pool, idx, mixed, a, b, A_log, dt_bias = stepped_pool(heads, family, seed)
    pool = copy_pool(cpu_pool, device)
    before = snapshot(cpu_pool)
    n = idx.numel()
    o_cpu = torch.full((n, heads, V), float("nan"), dtype=torch.bfloat16)
    gdn.step_inplace(cpu_pool, idx, mixed, a, b, A_log, dt_bias, o_cpu)
    o = torch.full((n, heads, V), float("nan"), dtype=torch.bfloat16, device=device)
    run(pool, *_to(device, idx, mixed, a, b, A_log, dt_bias), o)
    got_pool = {name: getattr(pool, name).cpu() for name in POOL_TENSORS}
    o = o.cpu()
    live = idx > 0
    rows = live.nonzero().squeeze(1)
    slots = idx[rows].long()
    h = before["hcnt"][slots]
    h = torch.where(h >= L, torch.zeros_like(h), h)
    old = dict(zip(CKPT, views(cpu_pool, before["raw"])))
    inp = {nm: old[nm][slots] for nm in CKPT}
    inp.update({nm: before[nm][slots] for nm in WIN})
    hk = GDN.key_heads(heads)
    k = len(rows)
    inp.update(h=h, qx=mixed[rows, : hk * K].reshape(k, hk, K), kx=mixed[rows, hk * K : 2 * hk * K].reshape(k, hk, K),
               vx=mixed[rows, 2 * hk * K :].reshape(k, heads, V), a=a[rows], b=b[rows], A_log=A_log, dt_bias=dt_bias)
    s = slots[:, None].expand(k, heads)
    hd = torch.arange(heads)[None, :].expand(k, heads)
    e = h.long()

    def appended(o_, t):
        return o_[rows], t["kbuf"][s, hd, e], t["ubuf"][s, hd, e], t["w"][slots], t["p"][slots]

    got = appended(o, got_pool)
    ok, worst = gdn_criterion.judge_step(got, gdn.step_reference(**inp))
    ok_cpu, worst_cpu = gdn_criterion.judge_step(got, appended(o_cpu, snapshot(cpu_pool)))
    touched = torch.zeros(cpu_pool.num_slots, heads, L, dtype=torch.bool)
    touched[s, hd, e] = True
    untouched = same_bits(got_pool["raw"], before["raw"])
    for name in ("kbuf", "ubuf"):
        untouched &= same_bits(got_pool[name][~touched], before[name][~touched])
    other = torch.ones(cpu_pool.num_slots, dtype=torch.bool)
    other[slots] = False
    for name in ("w", "p", "hcnt"):
        untouched &= same_bits(got_pool[name][other], before[name][other])
    return {"ok": ok, "worst": worst, "ok_vs_cpu": ok_cpu, "worst_vs_cpu": worst_cpu,
            "zero_rows": bool((o[~live] == 0).all()),
            "advanced": bool((got_pool["hcnt"][slots] == h + 1).all()) and same_bits(got_pool["hcnt"], cpu_pool.hcnt),
            "untouched": untouched,
            "flushed_read_as_empty": bool((before["hcnt"][2, ::2] == L).all())
            and bool((got_pool["hcnt"][2, ::2] == 1).all())}


def due_pool(heads: int = H, family: str = "structured", seed: int = 12):
    """A 6-slot CPU GDN pool whose slots 1..5 hold ``family``'s flush checkpoints and full windows:
    slot 1 all due (``hcnt == L``), slot 2 its even heads due (odd heads at 1, 3, ..), slot 3 due but
    left out of idx, slots 4-5 at ``L - 1``. Returns ``(pool, idx, due, q0)``."""
    x = gdn_inputs.make_flush(family, 5, "cpu", seed, heads)
    pool = gdn.Pool(6, "cpu", heads=heads)
    for name in CKPT + WIN:
        getattr(pool, name)[1:] = x[name]
    pool.hcnt[1] = L
    pool.hcnt[2] = torch.arange(heads, dtype=torch.int32) % L
    pool.hcnt[2, ::2] = L
    pool.hcnt[3] = L
    pool.hcnt[4:] = L - 1
    idx = torch.tensor([2, 0, -1, 5, 1, 4], dtype=torch.int32)
    due = torch.zeros(6, heads, dtype=torch.bool)
    due[1] = True
    due[2] = pool.hcnt[2] == L
    return pool, idx, due, x["q0"]


def pool_flush_form(device, run, heads: int = H, family: str = "structured", seed: int = 12) -> dict:
    """``run(pool, idx, q0)`` on ``due_pool`` moved to ``device``, against the CPU pool path
    (``gdn.flush_inplace`` on a CPU copy) and the fp32 reference on the due programs' old contents.
    Verdicts: ``ok`` (the criterion against the reference: ``batch_head`` its worst ratio),
    ``ok_vs_cpu`` (against the CPU pool's checkpoints: ``batch_head_vs_cpu``), ``reset`` (due
    programs' ``w = 0``, ``p = 1``), ``untouched`` (every other byte, and ``kbuf``, ``ubuf``,
    ``hcnt`` everywhere)."""
    cpu_pool, idx, due, q0 = due_pool(heads, family, seed)
    pool = copy_pool(cpu_pool, device)
    before = snapshot(cpu_pool)
    gdn.flush_inplace(cpu_pool, idx, q0)
    run(pool, *_to(device, idx, q0))
    got_pool = {name: getattr(pool, name).cpu() for name in POOL_TENSORS}
    slot, head = due.nonzero(as_tuple=True)
    old = views(cpu_pool, before["raw"])
    xs = {nm: t[slot, head].unsqueeze(0) for nm, t in zip(CKPT, old)}
    xs.update({nm: before[nm][slot, head].unsqueeze(0) for nm in WIN})
    xs["q0"] = q0
    got = tuple(t[slot, head].unsqueeze(0) for t in views(cpu_pool, got_pool["raw"]))
    cpu_got = tuple(t[slot, head].unsqueeze(0) for t in cpu_pool.checkpoint)
    res = gdn_criterion.evaluate_flush(xs, got, gdn.reference(**xs))
    res_cpu = gdn_criterion.evaluate_flush(xs, got, cpu_got)
    keep = ~due
    untouched = all(same_bits(a[keep], b[keep]) for a, b in zip(views(cpu_pool, got_pool["raw"]), old))
    untouched &= all(same_bits(got_pool[nm][keep], before[nm][keep]) for nm in ("w", "p"))
    untouched &= all(same_bits(got_pool[nm], before[nm]) for nm in ("kbuf", "ubuf", "hcnt"))
    reset = bool((got_pool["w"][due] == 0).all() and (got_pool["p"][due] == 1).all())
    reset &= same_bits(got_pool["w"], cpu_pool.w) and same_bits(got_pool["p"], cpu_pool.p)
    return {"ok": res["ok"], "batch_head": res["batch_head"].worst_ratio, "ok_vs_cpu": res_cpu["ok"],
            "batch_head_vs_cpu": res_cpu["batch_head"].worst_ratio, "reset": reset, "untouched": untouched}


def full_window_kept(device, run, heads: int = H, seed: int = 31) -> dict:
    """``run(pool, idx, mixed, a, b, A_log, dt_bias, o)`` on a packed GDN pool on ``device`` whose
    programs all hold a full window never flushed (``hcnt == L``, ``w[L - 1] = 1``): every pool
    tensor must stay bit-identical (``kept``), ``errors[0]`` count every live program once
    (``counted``), the padding row be zero, and ``o`` be the step of the whole window (``h = L``)
    by the reference's figure (``o_worst``, ``gdn_criterion.row_figures``)."""
    x = gdn_inputs.make_step("random", 3, "cpu", seed, heads)
    pool = gdn.Pool(4, device, heads=heads)
    for name in CKPT + WIN:
        getattr(pool, name)[1:] = x[name].to(device)
    pool.hcnt.fill_(L)
    pool.w[:, :, L - 1] = 1  # slot 0 too: the padding row must neither count it nor write to it
    idx = torch.tensor([2, 0, 3, 1], dtype=torch.int32)
    t = tokens(4, "cpu", seed + 1, heads)
    before = snapshot(pool)
    o = torch.full((4, heads, V), float("nan"), dtype=torch.bfloat16, device=device)
    run(pool, *_to(device, idx, mixed_rows(t), t["a"], t["b"], x["A_log"], x["dt_bias"]), o)
    kept = all(same_bits(getattr(pool, n), before[n]) for n in POOL_TENSORS)
    rows = torch.tensor([0, 2, 3])
    slots = idx[rows].long()
    inp = {n: v.cpu()[slots] for n, v in zip(CKPT + WIN, pool.checkpoint + pool.window)}
    inp.update({n: t[n][rows] for n in gdn_inputs.TOKEN_ARGS}, A_log=x["A_log"], dt_bias=x["dt_bias"],
               h=torch.full((3, heads), L, dtype=torch.int32))
    ref_o = gdn.step_reference(**inp)[0]
    o = o.cpu()
    return {"kept": kept, "counted": int(pool.errors[FULL]) == 3 * heads and int(pool.errors[OUT]) == 0,
            "zero_row": bool((o[1] == 0).all()), "o_worst": float(gdn_criterion.row_figures(o[rows], ref_o).max())}


def kernel_step_inplace(kernel: str = "triton"):
    """``step_inplace``'s arguments to the GDN pool-form kernel ``kernel`` (on a CPU pool: under
    the interpreter), through ``ops.gdn_step_pool``."""
    from leapquant.ops import gdn_step_pool

    def run(pool, idx, mixed, a, b, A_log, dt_bias, o):
        gdn_step_pool(pool.raw, *pool.window, pool.hcnt, pool.errors, idx, mixed, a, b, A_log, dt_bias, o, pool.layout,
                      kernel)

    return run


def kernel_flush_inplace(kernel: str = "triton"):
    """``flush_inplace``'s arguments to the GDN pool-form flush kernel ``kernel`` (on a CPU pool:
    under the interpreter), through ``ops.gdn_flush_pool``."""
    from leapquant.ops import gdn_flush_pool

    def run(pool, idx, q0):
        gdn_flush_pool(pool.raw, *pool.window, pool.hcnt, pool.picks, idx, q0, pool.layout, kernel, 0)

    return run
