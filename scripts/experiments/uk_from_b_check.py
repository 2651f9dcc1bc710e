"""CPU probe for a flush without the basis on the chain of products (NOTES "Next: the token
product off the basis's chain"): uk = (S^T b') R^-1, the third product taken on b' (S qk with
unit-scaled columns) before b' has its basis, R from an fp64 Cholesky of b' (qv = b' R^-1),
against the kernels' uk = S^T qv; the fast path only where every Cholesky pivot keeps at least
TAU of its column's squared norm (and no column is dependent), else the current path. Judged by
SPEC section 5 against the fp32 reference, beside the current emulation ("now").

    python scripts/experiments/uk_from_b_check.py B SEEDS TAUS    # e.g. 16 5,7 1e-6,1e-5,1e-4

Prints per family and seed: worst ratio head / (batch, head) / (batch, head) cap, and the
fraction of programs on the fast path."""

import sys

import torch

from leapquant.eval import flush_inputs as inputs
from leapquant.eval.flush_criterion import evaluate
from leapquant.kda.flush import emulation as emu, naive
F32, F64 = torch.float32, torch.float64
torch.set_num_threads(2)
def chol_R(x):
    X = x.to(F64); G = X.transpose(-1, -2) @ X
    L, info = torch.linalg.cholesky_ex(G)  # lower, G = L L^T; R = L^T
    L = torch.where((info == 0)[..., None, None], L, torch.eye(4, dtype=F64))
    R = L.transpose(-1, -2)
    piv = torch.diagonal(R, dim1=-2, dim2=-1) ** 2 / torch.diagonal(G, dim1=-2, dim2=-1)
    return R, piv.amin(-1)
def flush_fast(tau, x, kernel="gluon", parts=3):
    with torch.no_grad():
        C = x["codes"].to(F32)
        f, A, KU = emu.rebuild_factors(x["s_k"], x["u"], x["q"], x["kbuf"], x["ubuf"], x["gbuf"], x["w"], x["pcum"])
        s_v = x["s_v"].to(F32)
        a = emu.thin_products(C, s_v, f, A, KU, x["q0"].to(F32), True, parts, kernel)
        b = emu._unit_columns(emu.thin_products(C, s_v, f, A, KU, emu._unit_columns(a), False, parts, kernel))
        qv_ref, dependent = emu.basis(b, twice=True)          # the kernels' current qv (GS here)
        c = emu.thin_products(C, s_v, f, A, KU, b, True, parts, kernel)   # S^T b'
        try:
            R, piv = chol_R(b)
            piv = torch.nan_to_num(piv, nan=0.0)
            Rinv = torch.linalg.inv(R)
            fast_ok = (piv >= tau) & ~dependent
        except Exception:
            Rinv = torch.zeros(*b.shape[:-2], 4, 4, dtype=F64); fast_ok = torch.zeros(b.shape[:-2], dtype=torch.bool)
        qv_fast = (b.to(F64) @ Rinv).to(F32)
        uk_fast = (c.to(F64) @ Rinv).to(F32)
        uk_direct = emu.thin_products(C, s_v, f, A, KU, qv_ref, True, parts, kernel)
        m = fast_ok[..., None, None]
        qv = torch.where(m, qv_fast, qv_ref); uk = torch.where(m, uk_fast, uk_direct)
        uk, qv = emu.guard_overflow(uk, qv)
        u_new = uk.transpose(-1, -2).to(torch.float16).contiguous()
        q_new = qv.transpose(-1, -2).to(torch.float16).contiguous()
        out = emu.scales_and_codes(emu.residual(C, s_v, f, A, KU, q_new, u_new, kernel))
        return (*out, u_new, q_new), float(fast_ok.float().mean())
B = int(sys.argv[1]); seeds = [int(v) for v in sys.argv[2].split(",")]; taus = [float(t) for t in sys.argv[3].split(",")]
for fam in inputs.all_families():
    for seed in seeds:
        x = inputs.make(fam, B, "cpu", seed=seed); ref = naive.reference(**x)
        base = evaluate(x, emu.flush_emulated(**x, kernel="gluon"), ref)
        cells = [f"now {base['head'].worst_ratio:.4f}/{base['batch_head'].worst_ratio:.4f}/{base['batch_head'].worst_cap_ratio:.4f}"]
        for tau in taus:
            got, frac = flush_fast(tau, x)
            r = evaluate(x, got, ref)
            cells.append(f"tau={tau:g} ok={r['ok']} {r['head'].worst_ratio:.4f}/{r['batch_head'].worst_ratio:.4f}/{r['batch_head'].worst_cap_ratio:.4f} fast={frac:.2f}")
        print(f"{fam:14s} {seed}", " | ".join(cells), flush=True)
