"""The engine loop: what a serving engine runs per decode token, timed as it runs it.

Per token, every one of ``LAYERS`` KDA layers runs its state work (``decode_inplace``: the decode
step, and the flush of the windows it fills) on a ``Pool`` of its own (each layer's states
L2-cold when its turn comes, as in a model), the windows staggered so that 1 in 16 sequences
reaches a window boundary every token (sequence i starts at fill count i mod 16). One token of
all layers is captured in one CUDA graph and replayed; each replay is timed alone (CUDA events)
and is the next token of the same sequences. Reported per token and layer, against

- the floor: the step's 34,894 B plus the flush's 56,448 B / 16 a program, at the copy bandwidth
  measured in the same run;
- flash-linear-attention's ``fused_recurrent_kda_fwd`` on an fp32 state pool in place
  (``ssm_state_indices``, the gate and beta activations and the l2 norms in the kernel: the path
  vLLM runs), 2,097,152 B of state a slot.

Variants: ``serial`` (step, then flush, one stream), ``overlap`` (an ``Overlap`` scope: each
flush on a side stream beside the next layers), ``step`` (no flush: the fill counts restored
between replays, outside the timed region). Each also with a bf16 matmul per layer standing for
the rest of the model (``[B, 2304] x [2304, 24576]``, Kimi-Linear's hidden size, a weight a
layer). Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-step and
conless-leapquant-kda-flush.
"""

from __future__ import annotations

import contextlib
import statistics

import torch

from ..kda import H, K, L, R, V, Pool, step_inplace
from ..geometry import FLOOR_BYTES_PER_PROGRAM, STEP_FLOOR_BYTES_PER_PROGRAM
from ..layer import Overlap, decode_inplace
from . import step_inputs

LAYERS = 8
REPLAYS = 32
WARM_TOKENS = 3  # eager tokens before the capture (compiles nothing: the pools did; fills caches of fla)
HIDDEN, PROJECTION = 2304, 24576  # Kimi-Linear's hidden size; the matmul standing for a layer's other work
LAYER_FLOOR_BYTES = STEP_FLOOR_BYTES_PER_PROGRAM + FLOOR_BYTES_PER_PROGRAM / L  # a program's bytes a token
FLA_STATE_BYTES = H * K * V * 4  # a slot of fla's fp32 state
VARIANTS = ("serial", "overlap", "step", "fla")


class Model:
    """``LAYERS`` layers of ``B`` sequences: our pools (staggered windows), fla's fp32 state pools,
    one token's inputs, and a weight a layer for the matmul."""

    def __init__(self, B: int, device, seed: int = 0, layers: int = LAYERS, matmul: bool = True, fla: bool = True,
                 streams: int | None = None, **pool_kw):
        self.B, self.device, self.layers = B, torch.device(device), layers
        gen = torch.Generator(device=device).manual_seed(seed)
        self.params = step_inputs.model_params(device)
        self.q0 = torch.randn(V, R, generator=gen, device=device)
        self.idx = torch.arange(1, B + 1, dtype=torch.int32, device=device)
        self.pools, self.fills = [], []
        for layer in range(layers):
            pool = Pool(B + 1, device, **pool_kw)
            x = step_inputs.make("random", B, device, seed=seed * 1000 + layer)
            fill = (torch.arange(B, device=device) % L).to(torch.int32)[:, None].expand(B, pool.heads)
            live = torch.arange(L, device=device) < fill[..., None]  # [B, H, L]
            x["w"] = torch.where(live, 1.0, 0.0)
            x["gbuf"] = torch.where(live[..., None], x["gbuf"], torch.ones_like(x["gbuf"]))
            for view, name in zip(pool.checkpoint + pool.window, step_inputs.STEP_ARGS):
                view[1:] = x[name]
            pool.hcnt[1:] = fill
            self.pools.append(pool)
            self.fills.append(pool.hcnt.clone())
        tok = step_inputs.tokens(B, device, seed + 1)
        self.mixed = torch.cat([tok["qx"].reshape(B, -1), tok["kx"].reshape(B, -1), tok["vx"].reshape(B, -1)], -1)
        self.a, self.b = tok["a"], tok["b"]
        self.o = torch.empty(B, H, V, dtype=torch.bfloat16, device=device)
        self.overlap = Overlap(device, **({"streams": streams} if streams else {}))
        self.hidden = torch.randn(B, HIDDEN, generator=gen, device=device).bfloat16() if matmul else None
        self.weights = [torch.randn(HIDDEN, PROJECTION, generator=gen, device=device).bfloat16() * 0.02
                        for _ in range(layers)] if matmul else []
        self.projected = torch.empty(B, PROJECTION, dtype=torch.bfloat16, device=device) if matmul else None
        self.fla_states = [torch.randn(B + 1, H, K, V, generator=gen, device=device) * 0.05 for _ in range(layers)] \
            if fla else []
        hk = H * K  # fla's kernel takes dense [B, T, H, K] q, k and [B, T, H, V] v (made once)
        self.fla_q, self.fla_k, self.fla_v = (self.mixed[:, i * hk : (i + 1) * hk].reshape(B, 1, H, -1).contiguous()
                                              for i in range(3))

    def token(self, variant: str, matmul: bool) -> None:
        """One token of every layer (``VARIANTS``), with or without the matmul a layer."""
        p = self.params
        scope = self.overlap if variant == "overlap" else contextlib.nullcontext()
        with scope:
            for layer in range(self.layers):
                if matmul:
                    torch.matmul(self.hidden, self.weights[layer], out=self.projected)
                pool = self.pools[layer]
                if variant == "fla":
                    _fla_step(self, layer)
                elif variant == "step":
                    step_inplace(pool, self.idx, self.mixed, self.a, self.b, p["A_log"], p["dt_bias"], self.o)
                else:
                    decode_inplace(pool, self.idx, self.mixed, self.a, self.b, p["A_log"], p["dt_bias"], self.o,
                                   self.q0, overlap=self.overlap if variant == "overlap" else None)

    def restore_fills(self) -> None:
        """The staggered fill counts again (between replays of the ``step`` variant, untimed)."""
        for pool, fill in zip(self.pools, self.fills):
            pool.hcnt.copy_(fill)


def _fla_step(model: Model, layer: int) -> None:
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    p = model.params
    fused_recurrent_kda_fwd(model.fla_q, model.fla_k, model.fla_v, model.a.unsqueeze(1), model.b.unsqueeze(1),
                            A_log=p["A_log"], dt_bias=p["dt_bias"], initial_state=model.fla_states[layer],
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
    if variant == "overlap":
        model.overlap.close()
    del graph
    return times


def run(B: int, device, bandwidth: float, variants=VARIANTS, rounds: int = 2, seed: int = 0, streams: int | None = None,
        **pool_kw) -> dict:
    """The engine loop at batch ``B``: per variant (``VARIANTS``; ``fla`` where it imports) and
    with / without the matmul, the median over ``rounds`` interleaved rounds of each round's
    median replay (ms per token and layer), the floor (ms) at ``bandwidth`` (bytes/s), the
    pools' bytes a slot. Every round runs the variants in the same order on the same model.
    ``streams``: the ``Overlap`` scope's side streams (None: its default); ``pool_kw`` go to
    every ``Pool``."""
    variants = [v for v in variants if v != "fla" or fla_available()]
    model = Model(B, device, seed=seed, fla="fla" in variants, streams=streams, **pool_kw)
    res = {"batch_size": B, "layers": model.layers, "replays": REPLAYS,
           "floor_ms": B * H * LAYER_FLOOR_BYTES / bandwidth * 1e3,
           "flush_bytes_ms": B * H * FLOOR_BYTES_PER_PROGRAM / L / bandwidth * 1e3,
           "slot_bytes": model.pools[0].nbytes / model.pools[0].num_slots, "fla_slot_bytes": FLA_STATE_BYTES,
           "flush_streams": len(model.overlap.sides),
           "rounds": {}}
    for r in range(rounds):
        for matmul in (False, True):
            for variant in variants:
                key = f"{variant}{'+matmul' if matmul else ''}"
                t = time_tokens(model, variant, matmul)
                res["rounds"].setdefault(key, []).append(statistics.median(t))
    if model.weights:
        res["matmul_ms"] = _time_matmul(model)
    res["ms"] = {k: statistics.median(v) for k, v in res["rounds"].items()}
    return res


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
