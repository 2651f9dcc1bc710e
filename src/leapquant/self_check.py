"""The Gluon kernels' self-check on a GPU, for a triton release they were not run with: a few
programs of each operation through the Gluon and the portable kernel on a scratch pool of the
caller's head count and layout, judged by the accuracy criteria.

- flush: every program of two slots, due; per program ``err = mean |decode(checkpoint) - S|``
  with ``S`` rebuilt in fp64 (SPEC section 5's measure). The Gluon kernel passes where its error
  is at most ``FLUSH_TOLERANCE`` times the portable kernel's plus ``1e-6 mean|S|`` on every
  program (both kernels meet the 1.01 bound against the fp32 reference on their own; a
  miscompiled kernel is off by orders of magnitude), its outputs finite and its codes in range.
- step: the same slots at fill counts 0 .. L - 1 and one token; the outputs ``o`` and the
  appended ``ubuf`` rows within ``STEP_TOLERANCE`` of the portable kernel's, relative to each
  program's largest value, and the appended keys, gates, weights, ``pcum`` and fill counts
  within a bf16 / fp16 rounding or equal.

The family's builds (``family.py``: KDA's, or GDN's scalar-gate builds, whose weights and gate
product the step rewrites) are the ones checked. Run once a process for each device, head
count, layout and family by ``kernel.decide``. Source: LeapQuant (arXiv 2609.38166);
NVlabs/kda requests conless-leapquant-kda-flush and conless-leapquant-kda-step.
"""

from __future__ import annotations

import torch

from .family import KDA, Family
from .flush.naive import rebuild, rebuild_scalar
from .format import decode
from .geometry import K, L, QMAX, R, V
from .pool import empty_token, pool_checkpoint, state_specs, split_mixed

FLUSH_TOLERANCE = 1.02  # Gluon's reconstruction error over the portable kernel's, per program
STEP_TOLERANCE = 2.0**-6  # |o_gluon - o_portable| / max|o_portable|, per program (4 bf16 steps)
SLOTS = 3  # slot 0 reserved, two live slots


def _scratch(device, heads: int, layout: str, seed: int, family: Family = KDA) -> dict:
    # a scratch pool's tensors with random in-domain contents in slots 1 and 2
    g = torch.Generator(device=device).manual_seed(seed)
    t = {n: torch.full(shape, init, dtype=dt, device=device)
         for n, (dt, shape, init) in state_specs(SLOTS, heads, layout, family).items()}
    codes, s_k, s_v, u, q = pool_checkpoint(t["raw"], t["hcnt"], layout)
    n = (SLOTS - 1, heads)

    def rand(*shape):
        return torch.rand(*shape, generator=g, device=device)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device)

    codes[1:] = torch.randint(-QMAX, QMAX + 1, (*n, V, K), generator=g, device=device, dtype=torch.int8)
    s_k[1:] = 0.05 * torch.exp(0.7 * randn(*n, K))
    s_v[1:] = 0.3 * torch.exp(0.7 * randn(*n, V))
    u[1:] = randn(*n, R, K).half()
    q[1:] = randn(*n, R, V).half()
    t["kbuf"][1:] = randn(*n, L, K).bfloat16()
    t["ubuf"][1:] = randn(*n, L, V).bfloat16()
    t["w"][1:] = rand(*n, L)
    if family.scalar_gate:
        t["p"][1:] = 0.05 + 0.95 * rand(*n)
    else:
        t["gbuf"][1:] = (0.5 + 0.5 * rand(*n, L, K)).half()
        t["pcum"][1:] = -5 * rand(*n, K)
    return t


def _views(t: dict, layout: str, family: Family) -> tuple:
    # (checkpoint views, the window as the kernels take it) of a scratch pool's tensors
    return pool_checkpoint(t["raw"], t["hcnt"], layout), family.kernel_window({n: t[n] for n in family.window})


def _copy(t: dict) -> dict:
    return {n: x.clone() for n, x in t.items()}


def _flush_errors(t: dict, before: dict, layout: str, family: Family) -> tuple[torch.Tensor, torch.Tensor, bool]:
    # per program: (err fp64 [2, NH], mean|S| fp64, well-formed) of t's checkpoint against before's rebuild
    old_ckpt = [x[1:] for x in pool_checkpoint(before["raw"], before["hcnt"], layout)]
    old_win = [before[n][1:] for n in family.window]
    S = (rebuild_scalar if family.scalar_gate else rebuild)(*old_ckpt, *old_win, torch.float64)
    new_ckpt = pool_checkpoint(t["raw"], t["hcnt"], layout)
    D = decode(*(x[1:] for x in new_ckpt), dtype=torch.float64)
    codes = new_ckpt[0][1:]
    ok = bool(torch.isfinite(D).all()) and int(codes.min()) >= -QMAX and int(codes.max()) <= QMAX
    return (D - S).abs().mean((-2, -1)), S.abs().mean((-2, -1)), ok


def _check_flush(device, heads: int, layout: str, family: Family = KDA) -> tuple[bool, str]:
    from .kernel import launch_flush
    from .launch import pick_words

    t = _scratch(device, heads, layout, seed=1, family=family)
    t["hcnt"].fill_(L)
    before = _copy(t)
    idx = torch.arange(SLOTS, dtype=torch.int32, device=device)
    picks = torch.empty(pick_words(SLOTS * heads, device), dtype=torch.int32, device=device)
    runs = {}
    for name in ("gluon", "triton"):
        x = _copy(before)
        ckpt, window = _views(x, layout, family)
        launch_flush(ckpt, ckpt, window, torch.randn(V, R, generator=torch.Generator(device=device).manual_seed(2),
                                                       device=device), idx=idx, hcnt=x["hcnt"], picks=picks, kernel=name)
        runs[name] = _flush_errors(x, before, layout, family)
    (err_g, mag, ok_g), (err_t, _, _) = runs["gluon"], runs["triton"]
    ratio = float((err_g / (err_t + 1e-6 * mag)).max())
    ok = ok_g and ratio <= FLUSH_TOLERANCE
    return ok, f"flush: worst error ratio {ratio:.4f} over {err_g.numel()} programs (bound {FLUSH_TOLERANCE})"


def _check_step(device, heads: int, layout: str, family: Family = KDA) -> tuple[bool, str]:
    from .kernel import launch_step

    t = _scratch(device, heads, layout, seed=3, family=family)
    g = torch.Generator(device=device).manual_seed(4)
    t["hcnt"][1:] = torch.arange(2 * heads, device=device).view(2, heads).to(torch.int32) % L
    idx = torch.tensor([1, 0, 2], dtype=torch.int32, device=device)
    qx, kx, vx, a, b = empty_token(3, heads, device, family)
    mixed = torch.randn(3, qx.shape[1] * 2 + vx.shape[1], generator=g, device=device).bfloat16()
    a = torch.randn(a.shape, generator=g, device=device).bfloat16()
    b = torch.randn(b.shape, generator=g, device=device).bfloat16()
    A_log = torch.randn(heads, generator=g, device=device) * 0.5 - 1
    dt_bias = torch.randn(heads, *family.gate_inputs["dt_bias"], generator=g, device=device)
    out = {}
    for name in ("gluon", "triton"):
        x = _copy(t)
        ckpt, window = _views(x, layout, family)
        o = torch.full((3, heads, V), float("nan"), dtype=torch.bfloat16, device=device)
        errors = torch.zeros(2, dtype=torch.int32, device=device)
        launch_step(ckpt, window, x["hcnt"], (*split_mixed(mixed, heads, family), a, b), A_log, dt_bias, o, idx=idx,
                    errors=errors, guard_full=layout == "packed", key_group=family.key_group, kernel=name)
        out[name] = (o.float(), x)
    (o_g, x_g), (o_t, x_t) = out["gluon"], out["triton"]

    def worst(a, b):  # per program, relative to its largest value
        return float(((a - b).abs().amax(-1) / b.abs().amax(-1).clamp_min(1e-30)).max())

    worst_o = worst(o_g, o_t) if bool(torch.isfinite(o_g).all()) else float("inf")
    worst_u = worst(x_g["ubuf"].float(), x_t["ubuf"].float())
    gate = ("w", "p") if family.scalar_gate else ("gbuf", "pcum")  # GDN's step rewrites the weights: rounded
    same = all(torch.equal(x_g[n], x_t[n]) for n in ("hcnt",) + (() if family.scalar_gate else ("w",)))
    near = all(torch.allclose(x_g[n].float(), x_t[n].float(), rtol=2.0**-7, atol=1e-6) for n in ("kbuf", *gate))
    ok = worst_o <= STEP_TOLERANCE and worst_u <= STEP_TOLERANCE and same and near and bool((o_g[1] == 0).all())
    return ok, f"step: worst output difference {max(worst_o, worst_u):.2e} (bound {STEP_TOLERANCE:.2e})"


def self_check(device, heads: int, layout: str, fail: bool = False, family: Family = KDA) -> tuple[bool, str]:
    """``(passed, detail)``: the Gluon kernels against the portable ones on ``device`` for a pool
    of ``heads`` heads in ``layout`` of ``family`` (module docstring). ``fail``: report a failure
    whatever the result (``LEAPQUANT_SELF_CHECK=fail``, for tests). A kernel that raises fails the
    check."""
    try:
        results = [_check_flush(device, heads, layout, family), _check_step(device, heads, layout, family)]
    except Exception as e:  # a Gluon API this release does not fit shows up here
        return False, f"{type(e).__name__}: {e}"
    detail = "; ".join(d for _, d in results)
    if fail:
        return False, f"failure forced by LEAPQUANT_SELF_CHECK=fail ({detail})"
    return all(ok for ok, _ in results), detail
