"""The engine loop: what a serving engine runs per decode token, timed as it runs it.

Per token, every one of ``LAYERS`` layers of one family (KDA, or GDN: ``leapquant.family``) runs its state work (``decode_inplace``: the decode
step, and the flush of the windows it fills) on a ``Pool`` of its own (each layer's states
L2-cold when its turn comes, as in a model), the windows staggered so that 1 in 16 sequences
reaches a window boundary every token (sequence i starts at fill count i mod 16). One token of
all layers is captured in one CUDA graph and replayed; each replay is timed alone (CUDA events)
and is the next token of the same sequences. Reported per token and layer, against

- the floor: the step's bytes plus the flush's / 16 a program (KDA: 34,894 + 56,448 / 16; GDN:
  29,332 + 47,240 / 16; ``Family.step_floor_bytes``, ``flush_floor_bytes``), at the copy bandwidth
  measured in the same run;
- flash-linear-attention's ``fused_recurrent_kda_fwd`` on an fp32 state pool in place
  (``ssm_state_indices``, the gate and beta activations and the l2 norms in the kernel: the path
  vLLM runs), 2,097,152 B of state a slot. For GDN the same kernel with its key heads shared
  (GQA) and the scalar gate given on every key channel (``a`` and ``dt_bias`` broadcast): it
  moves exactly GDN's fp32 state (fla 0.6.0's ``fused_recurrent_gated_delta_rule`` returns a new
  state instead of updating a pool in place).

Variants: ``serial`` (step, then flush, one stream), ``overlap`` (an ``Overlap`` scope: each
flush on a side stream beside the next layers), ``step`` (no flush: the fill counts restored
between replays, outside the timed region), ``tilelang`` (the requests' own step and flush in turn,
where their folders are given and tilelang imports). Each also with a bf16 matmul per layer standing for
the rest of the model (``[B, 2304] x [2304, 24576]``, Kimi-Linear's hidden size, a weight a
layer). Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-step and
conless-leapquant-kda-flush.
"""

from __future__ import annotations

import contextlib
import statistics

import torch

from ..family import KDA, Family
from ..geometry import H, K, L, R, V
from ..layer import Overlap, decode_inplace
from . import gdn_inputs, request_baselines, step_inputs
from .step_loop import FAMILY_API, model_params

LAYERS = 8
REPLAYS = 32
WARM_TOKENS = 3  # eager tokens before the capture (compiles nothing: the pools did; fills caches of fla)
HIDDEN, PROJECTION = 2304, 24576  # Kimi-Linear's hidden size; the matmul standing for a layer's other work
FLA_STATE_BYTES = H * K * V * 4  # a slot of fla's fp32 state


def layer_floor_bytes(family: Family = KDA) -> float:
    """A program's bytes a token: the step's and a sixteenth of the flush's."""
    return family.step_floor_bytes + family.flush_floor_bytes / L
VARIANTS = ("serial", "overlap", "step", "fla")


class Model:
    """``LAYERS`` layers of ``B`` sequences: our pools (staggered windows), fla's fp32 state pools,
    one token's inputs, and a weight a layer for the matmul."""

    def __init__(self, B: int, device, seed: int = 0, layers: int = LAYERS, matmul: bool = True, fla: bool = True,
                 streams: int | None = None, family: Family = KDA, groups=(), requests: str | None = None,
                 **pool_kw):
        self.B, self.device, self.layers, self.family = B, torch.device(device), layers, family
        gen = torch.Generator(device=device).manual_seed(seed)
        self.params = model_params(device, family)
        self.q0 = torch.randn(V, R, generator=gen, device=device)
        self.idx = torch.arange(1, B + 1, dtype=torch.int32, device=device)
        self.fills = []
        Pool = FAMILY_API[family.name].Pool
        # the layers' pools as one stack (``Pool.layers``), so that a scope may flush several a launch
        self.pools = Pool.layers(layers, B + 1, device, **pool_kw)
        for layer, pool in enumerate(self.pools):
            x = step_inputs.make("random", B, device, seed=seed * 1000 + layer)
            fill = (torch.arange(B, device=device) % L).to(torch.int32)[:, None].expand(B, pool.heads)
            live = torch.arange(L, device=device) < fill[..., None]  # [B, H, L]
            x["w"] = torch.where(live, 1.0, 0.0)
            x["gbuf"] = torch.where(live[..., None], x["gbuf"], torch.ones_like(x["gbuf"]))
            x["p"] = gdn_inputs.gate_product(x["pcum"])
            for view, name in zip(pool.checkpoint + pool.window, ("codes", "s_k", "s_v", "u", "q", *family.window)):
                view[1:] = x[name]
            pool.hcnt[1:] = fill
            self.fills.append(pool.hcnt.clone())
        tok = step_inputs.tokens(B, device, seed + 1)
        if family.scalar_gate:  # q and k of each key head, a bias a head
            tok = gdn_inputs.from_kda_token(tok)
        self.mixed = torch.cat([tok[n].reshape(B, -1) for n in ("qx", "kx", "vx")], -1)
        self.a, self.b = tok["a"], tok["b"]
        self.o = torch.empty(B, H, V, dtype=torch.bfloat16, device=device)
        # streams given: that many side streams taken in turn at every batch size (a route to
        # measure); None: the scope's defaults (two, spread only below layer.SPREAD_BELOW sequences)
        # the scope's own choice of flush group (variant ``overlap``) and one scope per group size
        # of ``groups`` (``overlap-g<n>``)
        kw = {"streams": streams, "spread_below": 1 << 30} if streams else {}
        self.overlaps = {overlap_variant(g): Overlap(device, group=g, **kw) for g in (None, *groups)}
        self.overlap = self.overlaps["overlap"]
        self.hidden = torch.randn(B, HIDDEN, generator=gen, device=device).bfloat16() if matmul else None
        self.weights = [torch.randn(HIDDEN, PROJECTION, generator=gen, device=device).bfloat16() * 0.02
                        for _ in range(layers)] if matmul else []
        self.projected = torch.empty(B, PROJECTION, dtype=torch.bfloat16, device=device) if matmul else None
        self.fla_states = [torch.randn(B + 1, H, K, V, generator=gen, device=device) * 0.05 for _ in range(layers)] \
            if fla else []
        hk = family.key_heads(H) * K  # fla's kernel takes dense [B, T, HK, K] q, k, [B, T, H, V] v (made once)
        self.fla_q, self.fla_k = (self.mixed[:, i * hk : (i + 1) * hk].reshape(B, 1, -1, K).contiguous() for i in range(2))
        self.fla_v = self.mixed[:, 2 * hk :].reshape(B, 1, H, V).contiguous()
        # the gate on every key channel (GDN: its scalar broadcast over K)
        self.fla_a = (self.a[..., None].expand(B, H, K) if family.scalar_gate else self.a).unsqueeze(1).contiguous()
        self.fla_dt_bias = (self.params["dt_bias"][:, None].expand(H, K) if family.scalar_gate
                            else self.params["dt_bias"]).contiguous()
        # the requests' TileLang kernels on the same states (``requests``: their folders' parent)
        self.baseline, self.baseline_error = None, None
        if requests:
            try:
                self.baseline = request_baselines.Layers(requests, self.pools, family)
            except Exception as err:  # their compile: the variant is dropped, the reason kept
                self.baseline_error = repr(err)[:300]

    def token(self, variant: str, matmul: bool) -> None:
        """One token of every layer (``VARIANTS``), with or without the matmul a layer."""
        p = self.params
        overlap = self.overlaps.get(variant)
        scope = overlap or contextlib.nullcontext()
        with scope:
            for layer in range(self.layers):
                if matmul:
                    torch.matmul(self.hidden, self.weights[layer], out=self.projected)
                pool = self.pools[layer]
                if variant == "fla":
                    _fla_step(self, layer)
                elif variant == "tilelang":
                    self.baseline.decode(layer, self.idx, self.mixed, self.a, self.b, p["A_log"], p["dt_bias"], self.o,
                                         self.q0)
                elif variant == "step":
                    FAMILY_API[self.family.name].step_inplace(pool, self.idx, self.mixed, self.a, self.b, p["A_log"],
                                                              p["dt_bias"], self.o)
                else:
                    decode_inplace(pool, self.idx, self.mixed, self.a, self.b, p["A_log"], p["dt_bias"], self.o,
                                   self.q0, overlap=overlap)

    def restore_fills(self) -> None:
        """The staggered fill counts again (between replays of the ``step`` variant, untimed)."""
        for pool, fill in zip(self.pools, self.fills):
            pool.hcnt.copy_(fill)


def _fla_step(model: Model, layer: int) -> None:
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    p = model.params
    fused_recurrent_kda_fwd(model.fla_q, model.fla_k, model.fla_v, model.fla_a, model.b.unsqueeze(1),
                            A_log=p["A_log"], dt_bias=model.fla_dt_bias, initial_state=model.fla_states[layer],
                            inplace_final_state=True, ssm_state_indices=model.idx, use_qk_l2norm_in_kernel=True,
                            use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, out=model.o.unsqueeze(1))


def fla_available() -> bool:
    try:
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd  # noqa: F401
    except ImportError:
        return False
    return True


def time_tokens(model: Model, variant: str, matmul: bool, replays: int = REPLAYS) -> list[float]:
    """Each replay's time (ms) of one token of ``variant`` captured in a CUDA graph (after
    ``WARM_TOKENS`` eager tokens), per token and layer."""
    for _ in range(WARM_TOKENS):
        model.token(variant, matmul)
        if variant == "step":
            model.restore_fills()
    torch.cuda.synchronize(model.device)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(model.device)
    side.wait_stream(torch.cuda.current_stream(model.device))
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        model.token(variant, matmul)
    torch.cuda.current_stream(model.device).wait_stream(side)
    times = []
    for _ in range(replays):
        if variant == "step":
            model.restore_fills()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / model.layers)
    if variant in model.overlaps:
        model.overlaps[variant].close()
    del graph
    return times


def run(B: int, device, bandwidth: float, variants=VARIANTS, rounds: int = 2, seed: int = 0, streams: int | None = None,
        family: Family = KDA, groups=(), requests: str | None = None, **pool_kw) -> dict:
    """The engine loop at batch ``B``: per variant (``VARIANTS``; ``fla`` where it imports) and
    with / without the matmul, the median over ``rounds`` interleaved rounds of each round's
    median replay (ms per token and layer), the floor (ms) at ``bandwidth`` (bytes/s), the
    pools' bytes a slot. Every round runs the variants in the same order on the same model.
    ``streams``: the ``Overlap`` scope's side streams (None: its default); ``groups``: layers a
    flush launch (``Overlap(group=...)``) to compare, each a variant ``overlap-g<n>`` after
    ``overlap`` (the scope's own choice, ``layer.flush_group``); ``pool_kw`` go to every ``Pool``; ``family``: the layers'
    (KDA or GDN); ``requests``: the parent folder of the NVlabs/kda request folders, for the
    ``tilelang`` variant (their step then flush, ``request_baselines``) where tilelang imports."""
    groups = tuple(dict.fromkeys(groups))  # each size once
    variants = [v for v in variants if v != "fla" or fla_available()]
    errors = {}
    if requests and not request_baselines.available(requests, family):
        errors["tilelang"] = request_baselines.UNAVAILABLE.get((requests, family.name))
        requests = None
    if requests:
        variants.append("tilelang")
    at = variants.index("overlap") + 1 if "overlap" in variants else len(variants)
    variants[at:at] = [overlap_variant(g) for g in groups]
    model = Model(B, device, seed=seed, fla="fla" in variants, streams=streams, family=family, groups=groups,
                  requests=requests, **pool_kw)
    if requests and model.baseline is None:
        variants.remove("tilelang")
        errors["tilelang"] = model.baseline_error
    res = {"family": family.name, "batch_size": B, "layers": model.layers, "replays": REPLAYS,
           "floor_ms": B * H * layer_floor_bytes(family) / bandwidth * 1e3,
           "flush_bytes_ms": B * H * family.flush_floor_bytes / L / bandwidth * 1e3,
           "slot_bytes": model.pools[0].nbytes / model.pools[0].num_slots, "fla_slot_bytes": FLA_STATE_BYTES,
           "flush_streams": len(model.overlap.sides), "flush_groups": list(groups),
           "rounds": {}, **({"errors": errors} if errors else {})}
    for r in range(rounds):
        for matmul in (False, True):
            for variant in variants:
                key = f"{variant}{'+matmul' if matmul else ''}"
                try:
                    t = time_tokens(model, variant, matmul)
                except Exception as err:  # an outside kernel (fla's, the requests') may fail to capture
                    if variant in ("fla", "tilelang"):
                        res.setdefault("errors", {})[key] = repr(err)[:300]
                        torch.cuda.synchronize(model.device)
                        continue
                    raise
                res["rounds"].setdefault(key, []).append(statistics.median(t))
    if model.weights:
        res["matmul_ms"] = _time_matmul(model)
    res["ms"] = {k: statistics.median(v) for k, v in res["rounds"].items()}
    return res


def overlap_variant(group: int | None) -> str:
    """The variant name of an ``Overlap`` scope flushing ``group`` layers a launch: ``overlap``
    for the scope's own choice (None), ``overlap-g<group>`` for a given size."""
    return "overlap" if group is None else f"overlap-g{group}"


def _time_matmul(model: Model) -> float:
    # one layer's matmul alone, L2-cold over the layers' weights (median ms)
    times = []
    for i in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(model.hidden, model.weights[i % model.layers], out=model.projected)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times[2:])
