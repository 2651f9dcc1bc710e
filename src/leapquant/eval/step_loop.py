"""The decode loop on a Pool against flash-linear-attention's fp32-state recurrence.

A prefill gives each sequence an fp32 state, as an engine's would: fla's ``chunk_kda`` on CUDA
(bf16 q, k, v as a model produces them, l2-normalised in the kernel, the step's gate and bf16
beta), fla's ``naive_recurrent_kda`` on the CPU (``chunk_kda``'s Triton kernels need a GPU);
``write_state`` compresses it into a pool slot; then every token runs ``step_inplace`` and
``leapquant.kda.flush_inplace`` (which compresses each window as it fills). The same tokens
continue fla's recurrence from the same fp32 state, and the outputs are compared window by
window. fla is imported here only (an evaluation module; nothing the engines import needs it).

fla's ``naive_recurrent_kda(q, k, v, g, beta, scale, initial_state, output_final_state)``
(fla-core 0.6.0, ``fla/ops/kda/naive.py``): q, k ``[B, T, H, K]``, v ``[B, T, H, V]``, g
``[B, T, H, K]`` the per-channel decay in log space, beta ``[B, T, H]``, state ``[B, H, K, V]``;
per token ``S = S * exp(g)[:, None]``, ``S += (beta k) (v - k^T S)^T``, ``o = (scale q)^T S``. It
does not normalise q or k (fla's kernels do that on request, ``use_qk_l2norm_in_kernel``), so
the loop feeds it the step's own ``kn``, ``qn`` (``qn`` already holds ``K^-0.5``: ``scale=1``),
``g`` and the bf16-rounded ``beta`` (``naive.normalize_qk``, ``naive.gate``).

``python -m leapquant.eval.step_loop [--tokens T] [--sequences N]`` prints the per-window errors.
Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
"""

from __future__ import annotations

import argparse
import json

import torch

from .. import gdn, kda
from ..family import KDA, Family
from ..geometry import H, K, L, R, V
from ..step.naive import beta_bf16, gate, normalize_qk, scalar_gate
from . import gdn_inputs, step_inputs
from .report import check_output

FAMILY_API = {"kda": kda, "gdn": gdn}  # each family's calls


def token_stream(N: int, T: int, device="cpu", seed: int = 0, family: Family = KDA) -> dict:
    """``T`` tokens for ``N`` sequences, as the step families draw them: ``qx, kx`` bf16 ``[T, N,
    HK, K]`` (``HK = family.key_heads(H)``: GDN's key heads take the rows of the even heads), ``a``
    bf16 ``[T, N, H, K]`` (GDN: ``[T, N, H]``, the first channel), ``vx`` bf16 ``[T, N, H, V]``
    (N(0, 1)), ``b`` bf16 ``[T, N, H]`` (2 N(0, 1))."""
    toks = [step_inputs.tokens(N, device, seed * 100003 + t) for t in range(T)]
    out = {n: torch.stack([t[n] for t in toks]) for n in step_inputs.TOKEN_ARGS}
    return gdn_inputs.from_kda_token(out) if family.scalar_gate else out


def model_params(device, family: Family = KDA) -> dict:
    """The step families' ``A_log`` ``[H]`` and ``dt_bias`` (KDA ``[H, K]``; GDN ``[H]``, the
    first channel)."""
    params = step_inputs.model_params(device)
    return gdn_inputs.from_kda_params(params) if family.scalar_gate else params


def fla_inputs(tok: dict, params: dict, family: Family = KDA) -> dict:
    """fla's ``q, k, v, g, beta`` (fp32, ``[N, T, H, ...]``) from a token stream: the step's own
    normalisation and gate (GDN: q and k repeated over each key group, the scalar gate on every
    key channel: GDN's recurrence as KDA's)."""
    qx, kx = (tok[n].repeat_interleave(family.key_group, -2) for n in ("qx", "kx"))
    qn, kn = normalize_qk(qx, kx)
    if family.scalar_gate:
        g = scalar_gate(tok["a"], params["A_log"], params["dt_bias"])[0][..., None].expand(*kn.shape)
        beta = beta_bf16(tok["b"]).float()
    else:
        g, _, beta = gate(tok["a"], tok["b"], params["A_log"], params["dt_bias"])
    return {"q": qn.transpose(0, 1), "k": kn.transpose(0, 1), "v": tok["vx"].float().transpose(0, 1),
            "g": g.transpose(0, 1), "beta": beta.transpose(0, 1)}


def fla_recurrence(tok: dict, params: dict, state: torch.Tensor | None, family: Family = KDA):
    """fla's fp32 recurrence over ``tok`` from ``state`` (``[N, H, K, V]`` or None for zeros):
    ``(o fp32 [T, N, H, V], final state fp32 [N, H, K, V])``."""
    from fla.ops.kda.naive import naive_recurrent_kda

    x = fla_inputs(tok, params, family)
    o, S = naive_recurrent_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=1.0,
                               initial_state=state, output_final_state=True)
    return o.transpose(0, 1), S


def fla_prefill(tok: dict, params: dict, method: str, state: torch.Tensor | None = None, family: Family = KDA):
    """fla over the prompt ``tok`` from ``state`` (fp32 ``[N, H, K, V]``, None: zeros): ``(o fp32
    [T, N, H, V], final state fp32 [N, H, K, V])``, by ``chunk_kda`` (KDA) or
    ``chunk_gated_delta_rule`` (GDN, q and k repeated over each key group) with
    ``method="chunk"`` (CUDA: the raw bf16 q, k, v, ``use_qk_l2norm_in_kernel``, scale K^-1/2,
    the step's gate and bf16-rounded beta), or ``naive_recurrent_kda`` (``"naive"``, on the
    step's own ``kn``, ``qn``). Raises ValueError for another method."""
    if method == "naive":
        return fla_recurrence(tok, params, state, family)
    if method != "chunk":
        raise ValueError(f"prefill method {method!r}: 'chunk' or 'naive'")
    q, k = (tok[n].repeat_interleave(family.key_group, -2).transpose(0, 1).contiguous() for n in ("qx", "kx"))
    v = tok["vx"].transpose(0, 1).contiguous()
    if family.scalar_gate:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as chunk

        g = scalar_gate(tok["a"], params["A_log"], params["dt_bias"])[0]
        beta = beta_bf16(tok["b"]).float()
    else:
        from fla.ops.kda import chunk_kda as chunk

        g, _, beta = gate(tok["a"], tok["b"], params["A_log"], params["dt_bias"])
    o, S = chunk(q, k, v, g.transpose(0, 1).contiguous(), beta.transpose(0, 1).bfloat16().contiguous(),
                 scale=K ** -0.5, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
    return o.transpose(0, 1).float(), S.float()


def decode_loop(N: int = 2, T: int = 32, prefill: int = 64, device="cpu", seed: int = 0,
                bias_shift: float = 0.0, prefill_method: str | None = None, prefill_chunks: int = 1,
                family: Family = KDA) -> dict:
    """Run the loop (module docstring) for ``N`` sequences and ``T`` decode tokens after a
    ``prefill``-token prefill. Returns ``{"window_rel": [...], "window_worst_head": [...],
    "rounding_rel": [...], "state_scale": float, "prefill": str}``: per window of ``L`` tokens, ``||o - o_fla|| /
    ||o_fla||`` over the window's outputs, the worst of that ratio over (sequence, head), and the
    same ratio for ``bf16(o_fla)`` alone (the output format's own share). ``bias_shift`` is added
    to ``dt_bias`` (e.g. -4: slow gates, ~0.7% decay a token, so the state and its checkpoint
    carry a long memory instead of being forgotten within a window). ``prefill_method``:
    ``fla_prefill``'s, by default ``"chunk"`` on CUDA and ``"naive"`` elsewhere.
    ``prefill_chunks``: the prompt prefilled in that many equal chunks as an engine's chunked
    prefill runs it (each chunk from ``read_state`` of the pool, its final state stored back by
    ``write_state``); fla's reference runs the whole prompt at once. ``family``: KDA's layers, or
    GDN's (the same loop on a GDN pool)."""
    api = FAMILY_API[family.name]
    params = model_params(device, family)
    params["dt_bias"] = params["dt_bias"] + bias_shift
    gen = torch.Generator(device=device).manual_seed(seed + 17)
    q0 = torch.randn(V, R, generator=gen, device=device)
    prefill_method = prefill_method or ("chunk" if torch.device(device).type == "cuda" else "naive")
    prompt = token_stream(N, prefill, device, seed + 1, family)
    _, S0 = fla_prefill(prompt, params, prefill_method, family=family)
    tok = token_stream(N, T, device, seed + 2, family)
    o_ref, _ = fla_recurrence(tok, params, S0.clone(), family)

    pool = api.Pool(N + 1, device)
    idx = torch.arange(1, N + 1, dtype=torch.int32, device=device)
    if prefill % prefill_chunks:
        raise ValueError(f"a {prefill}-token prompt does not split into {prefill_chunks} equal chunks")
    size = prefill // prefill_chunks
    for c in range(prefill_chunks):
        chunk = {n: t[c * size : (c + 1) * size] for n, t in prompt.items()}
        _, S = fla_prefill(chunk, params, prefill_method, api.read_state(pool, idx) if c else None, family)
        api.write_state(pool, idx, S, q0)
    outs = []
    for t in range(T):
        mixed = torch.cat([tok["qx"][t].reshape(N, -1), tok["kx"][t].reshape(N, -1), tok["vx"][t].reshape(N, -1)], -1)
        o = torch.empty(N, H, V, dtype=torch.bfloat16, device=device)
        api.step_inplace(pool, idx, mixed, tok["a"][t], tok["b"][t], params["A_log"], params["dt_bias"], o)
        api.flush_inplace(pool, idx, q0)
        outs.append(o.float())
    o = torch.stack(outs)  # [T, N, H, V]
    res = {"window_rel": [], "window_worst_head": [], "rounding_rel": [],
           "state_scale": float(S0.abs().mean()), "prefill": prefill_method, "prefill_chunks": prefill_chunks}
    for w0 in range(0, T, L):
        sl = slice(w0, w0 + L)
        err, ref = o[sl] - o_ref[sl], o_ref[sl]
        res["window_rel"].append(float(err.norm() / ref.norm()))
        per_head = err.square().sum((0, 3)).sqrt() / ref.square().sum((0, 3)).sqrt()  # [N, H]
        res["window_worst_head"].append(float(per_head.max()))
        res["rounding_rel"].append(float((ref.bfloat16().float() - ref).norm() / ref.norm()))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--sequences", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bias-shift", type=float, default=0.0, help="added to dt_bias (-4: slow gates)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when present")
    ap.add_argument("--json", default=None, help="write the per-window figures to this JSON file")
    ap.add_argument("--family", choices=tuple(FAMILY_API), default="kda", help="the layers' model family")
    args = ap.parse_args(argv)
    for name in ("tokens", "sequences", "prefill"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    check_output(ap, "--json", args.json, stdout_ok=False)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    from ..family import FAMILIES

    res = decode_loop(args.sequences, args.tokens, args.prefill, device, args.seed, args.bias_shift,
                      family=FAMILIES[args.family])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "device": device, **res}, f, indent=1)
    chunk = "chunk_gated_delta_rule" if args.family == "gdn" else "chunk_kda"
    print(f"{args.family}: prefill by fla's {chunk if res['prefill'] == 'chunk' else 'naive_recurrent_kda'}; "
          f"state scale (mean |S| after it): {res['state_scale']:.4g}")
    print("window  rel. error  worst head  bf16(o) alone")
    for i, (a, b, c) in enumerate(zip(res["window_rel"], res["window_worst_head"], res["rounding_rel"])):
        print(f"{i:6d}  {a:10.3e}  {b:10.3e}  {c:13.3e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
