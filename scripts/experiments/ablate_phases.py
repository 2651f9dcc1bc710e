"""Place time inside the flush kernel by cutting phases out of copies of it (GPU).

Writes ablation copies of ``leapquant/kda/flush.py`` to a temp folder, each with one phase
removed, and times ``launch_flush`` (functional mode, random family, 4 input sets in rotation,
CUDA events, median of 20, the variants taking turns call by call). The copies compute wrong
checkpoints on purpose: this measures only.
A variant named ``rev:REV`` times the kernel as committed at git revision REV, ``file:PATH`` the
kernel module at PATH (A/B runs of kernel versions in one process).

    python scripts/experiments/ablate_phases.py [B] [variant,variant,...]      e.g. 256 rev:HEAD~1,full
"""

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile

import torch

from leapquant.eval import flush_inputs as inputs
from leapquant.kda.flush import triton_kernel as flush

SRC = open(flush.__file__).read().replace("from ..", "from leapquant.kda.")
SUBSPACE = ("    qk = _orthonormal_cols(_dot_fp32(sht, smt, slt, q0p, True, UPCAST), NR, NORM_MIN, DROP, QK_TWICE)"
            "  # [K, RP]\n"
            "    qv = _orthonormal_cols(_dot_fp32(sh, sm, sl, qk, True, UPCAST), NR, NORM_MIN, DROP, True)  # [V, RP]\n")
PRODUCTS = ("    qk = _dot_fp32(sht, smt, slt, q0p, True, UPCAST)\n"
            "    qv = _dot_fp32(sh, sm, sl, qk, True, UPCAST)\n")
TOKENS = ("    if SPLIT3:\n        uk = _dot_fp32(sht, smt, slt, qv, True, UPCAST)\n"
          "    else:  # hi and mid are the two-part split of S\n        uk = _dot_fp32(sht, sht, smt, qv, False, UPCAST)\n"
          "    uk = uk * _pow2(ex)\n")
CUTS = {
    "full": [],
    "maxnreg128": [("num_warps=NUM_WARPS, num_stages=1,", "num_warps=NUM_WARPS, num_stages=1, maxnreg=128,")],
    "no_gram_schmidt": [(SUBSPACE, PRODUCTS)],
    "no_subspace": [(SUBSPACE + TOKENS, "    qv = q0p\n    uk = tl.trans(u_old.to(tl.float32))\n")],
    "rebuild_only": [("    # one round of subspace iteration", "    tl.store(codes_out + slot * C_SLOT + head * C_HEAD"
                      " + v[:, None] * NK + k[None, :], s.to(tl.int8))\n    return\n    # one round of subspace iteration")],
    "loads_copy": [("    # rebuild: fp16 x fp16", "    tl.store(codes_out + slot * C_SLOT + head * C_HEAD"
                    " + v[:, None] * NK + k[None, :], codes)\n    return\n    # rebuild: fp16 x fp16")],
}


def load_variant(name: str, folder: str):
    if name.startswith(("rev:", "file:")):
        kind, where = name.split(":", 1)
        if kind == "rev":
            src = subprocess.run(["git", "show", f"{where}:src/leapquant/kda/flush.py"], capture_output=True,
                                 text=True, check=True).stdout
        else:
            with open(where) as f:
                src = f.read()
        src = src.replace("from ..", "from leapquant.kda.")
        name = kind + "_" + "".join(c if c.isalnum() else "_" for c in where)
        cuts = []
    else:
        src, cuts = SRC, CUTS[name]
    for old, new in cuts:
        if old not in src:
            raise RuntimeError(f"{name}: the kernel changed, update the cut {old[:40]!r}")
        src = src.replace(old, new)
    path = os.path.join(folder, f"flush_{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"flush_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    B = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(CUTS)
    sets = [inputs.make("random", B, "cuda", seed=s) for s in range(4)]
    outs = [tuple(torch.empty_like(x[n]) for n in inputs.CHECKPOINT_ARGS) for x in sets]
    with tempfile.TemporaryDirectory() as folder:
        launches, kernels = {}, {}
        for name in names:
            mod = load_variant(name, folder)

            def launch(i, mod=mod):
                x = sets[i % 4]
                return mod.launch_flush(tuple(x[n] for n in inputs.CHECKPOINT_ARGS), outs[i % 4],
                                        tuple(x[n] for n in inputs.WINDOW_ARGS), x["q0"])

            kernels[name] = launch(0)  # compiles
            launches[name] = launch
        torch.cuda.synchronize()
        # variants take turns call by call, so clock ramp-up and drift hit them alike
        times = {name: [] for name in names}
        for i in range(24):
            for name in names:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                launches[name](i)
                b.record()
                b.synchronize()
                times[name].append(a.elapsed_time(b))
        for name in names:
            k = kernels[name]
            print(f"{name:16s} regs={getattr(k, 'n_regs', '?')} spills={getattr(k, 'n_spills', '?')} "
                  f"B={B} median {statistics.median(times[name][4:]):.4f} ms", flush=True)


if __name__ == "__main__":
    main()
