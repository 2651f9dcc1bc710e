"""Compile a flush kernel for sm_90a without a GPU (Triton's bundled ptxas) and report
registers, spills and shared memory; optionally dump TTGIR/PTX/SASS to a folder.

    python scripts/compile_sm90.py [--gluon | --step] [--num-warps 8] [--in-place [--layout packed|request]]
                                   [--heads 32] [--ctas-per-sm 2] [--family kda|gdn] [--dump DIR] [--barriers]

--family: the build of a model family (``leapquant.family``: KDA's per-channel gate, GDN's scalar
gate and key groups); the same kernel source, other compile-time switches.

--num-warps: the portable flush kernel's warps (the Gluon kernels use their own NUM_WARPS).

--barriers also lists the kernel's barriers (BAR) by the source line they belong to (nvdisasm's
line table): the explicit ones and those Triton adds for layout changes, cross-warp reductions
and shared-memory hazards (its analysis works on whole buffers, so a second store into another
slice of a buffer just written gets one).

--gluon compiles the Gluon kernel (needs a triton in launch.GLUON_COMPILES_WITH, e.g. the `dev`
extra's triton 3.6.0, the release of launch.GLUON_VERIFIED_TRITON it was run with); without it,
the portable Triton kernel.
"""

import argparse
import os
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from leapquant.family import FAMILIES, KDA
from leapquant.flush import triton_kernel as flush
from leapquant.geometry import H, K, R, V
from leapquant.launch import GLUON_COMPILES_WITH, STEP_CONSTANTS, checkpoint_strides
from leapquant.pool import Pool

POINTERS = {
    "codes_in": "*i8", "sk_in": "*fp32", "sv_in": "*fp32", "u_in": "*fp16", "q_in": "*fp16",
    "codes_out": "*i8", "sk_out": "*fp32", "sv_out": "*fp32", "u_out": "*fp16", "q_out": "*fp16",
    "kbuf": "*bf16", "ubuf": "*bf16", "gbuf": "*fp16", "w": "*fp32", "pcum": "*fp32", "q0": "*fp32",
    "idx": "*i32", "hcnt": "*i32", "num_programs": "i32", "picks": "*i32", "pick_stride": "i32",
    "ones": "*fp16",
}
NUM_STAGES = int(os.environ.get("NUM_STAGES", "1"))
H200_SMS = 132  # the persistent grid's size on the target
DENSE_STRIDES = dict(C_SLOT=H * V * K, C_HEAD=V * K, SK_SLOT=H * K, SK_HEAD=K, SV_SLOT=H * V, SV_HEAD=V,
                     U_SLOT=H * R * K, U_HEAD=R * K, U_ROW=K, Q_SLOT=H * R * V, Q_HEAD=R * V, Q_ROW=V)


def pool_strides(layout: str = "packed", heads: int = H) -> dict:
    """The checkpoint strides of a pool's views (codes int8, s_k / s_v fp32, u / q fp16 views of
    one raw buffer) in ``layout`` at ``heads`` heads, and its head count ``NH``."""
    return {**checkpoint_strides(*Pool(2, "cpu", heads=heads, layout=layout).checkpoint), "NH": heads}


def strides(in_place: bool, layout: str = "packed", heads: int = H) -> dict:
    """The checkpoint strides a launch passes (and ``NH``): a pool's views in pool form
    (``layout``, ``heads``), dense tensors of 32 heads otherwise."""
    return pool_strides(layout, heads) if in_place else {**DENSE_STRIDES, "NH": H}


def family_constants(family=KDA, step: bool = False) -> dict:
    """The compile-time switches of ``family``'s build (and the pointers it passes as None)."""
    consts = {"SCALAR_GATE": family.scalar_gate}
    if step:
        consts["KEY_GROUP"] = family.key_group
    if family.scalar_gate:  # no per-entry gates
        consts["gbuf"] = None
        if step:
            consts["g_row"] = None
    return consts


def compile_kernel(num_warps: int, in_place: bool, extra: dict | None = None, module=flush, layout: str = "packed",
                   heads: int = H, family=KDA):
    params = [p.name for p in module._flush_kernel.params]
    consts = {"IN_PLACE": in_place, "UPCAST": False, "TILE": module.FLAG_TILE, "PERSISTENT": False, "CTAS": H200_SMS,
              "PARTS": module.SUBSPACE_SPLIT, **module._CONSTANTS, **strides(in_place, layout, heads),
              **family_constants(family), **(extra or {})}
    sig = {}
    for name in params:
        sig[name] = "constexpr" if name in consts else POINTERS.get(name, "constexpr")
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(params) if n in POINTERS and n not in ("q0", "idx", "picks")}
    src = ASTSource(module._flush_kernel, sig, constexprs={(params.index(k),): v for k, v in consts.items() if k in params},
                    attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "num_stages": NUM_STAGES})


STEP_POINTERS = {
    "codes": "*i8", "s_k": "*fp32", "s_v": "*fp32", "u": "*fp16", "q": "*fp16",
    "kbuf": "*bf16", "ubuf": "*bf16", "gbuf": "*fp16", "w": "*fp32", "pcum": "*fp32", "fill": "*i32",
    "qx": "*bf16", "kx": "*bf16", "vx": "*bf16", "a": "*bf16", "b": "*bf16", "A_log": "*fp32", "dt_bias": "*fp32",
    "o": "*bf16", "k_row": "*bf16", "u_row": "*bf16", "g_row": "*fp16", "w_new": "*fp32", "pcum_new": "*fp32",
    "idx": "*i32", "errors": "*i32", "qk_row": "i32", "v_row": "i32", "num_programs": "i32", "ctas": "i32",
}


def compile_step(in_place: bool, gluon: bool = False, layout: str = "packed", heads: int = H, family=KDA):
    """A decode-step kernel (the portable one, or the Gluon one) compiled for sm_90a (in pool form
    the strides of a pool of ``layout`` and ``heads``, the full-window guard in the packed one)."""
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource as Source

        from leapquant.step import gluon_kernel as st
    else:
        Source = ASTSource
        from leapquant.step import triton_kernel as st

    fn = st._step_kernel
    params = [p.name for p in fn.params]
    consts = {**STEP_CONSTANTS, **strides(in_place, layout, heads), "IN_PLACE": in_place,
              "GUARD_FULL": in_place and layout == "packed", **family_constants(family, step=True)}
    sig = {name: "constexpr" if name in consts else STEP_POINTERS.get(name, "constexpr") for name in params}
    # the pointers the runtime specialises on are 16-byte aligned (the pool's views and dense tensors)
    unspecialised = set(fn.do_not_specialize) | {"qk_row", "v_row", "num_programs", "ctas"}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(params)
             if n in STEP_POINTERS and n not in unspecialised and n not in consts}
    src = Source(fn, sig, constexprs={(params.index(k),): v for k, v in consts.items() if k in params}, attrs=attrs)
    options = {"num_warps": st.NUM_WARPS, "maxnreg": st.MAX_REGISTERS} if gluon else {"num_warps": st.NUM_WARPS, "num_stages": 1}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def require_verified_gluon() -> None:
    """Exit with a message, before compiling anything, unless this triton is one the Gluon kernels
    are checked to compile with (``launch.GLUON_COMPILES_WITH``: Gluon's API changes between
    releases; another one fails deep inside it)."""
    try:
        from leapquant.flush import gluon_kernel as fg  # noqa: F401
    except Exception as e:  # a triton without Gluon, or whose Gluon API the module does not fit
        raise SystemExit(f"--gluon: the Gluon kernel does not import under triton {triton.__version__} ({e}); "
                         "install the dev extra: pip install -e '.[dev]'")
    if triton.__version__ not in GLUON_COMPILES_WITH:
        raise SystemExit(f"--gluon needs triton {' or '.join(GLUON_COMPILES_WITH)} (have {triton.__version__}); "
                         "install the dev extra: pip install -e '.[dev]'")


def compile_gluon(in_place: bool, tile: int | None = None, layout: str = "packed", heads: int = H,
                  ctas_per_sm: int | None = None, family=KDA):
    """The Gluon kernel compiled for sm_90a (raises where this triton's Gluon API differs): the
    pool form with the strides of a pool of ``layout`` and ``heads`` and the flag-scan tile
    ``tile`` (default the largest; a pool call's is ``launch.flag_tile`` of its candidates), or the
    functional form; a grid of ``ctas_per_sm`` CTAs an SM (default the kernel's own)."""
    from leapquant.flush import gluon_kernel as fg

    consts = {"IN_PLACE": in_place, "TILE": tile or fg.FLAG_TILE, "CTAS": H200_SMS * (ctas_per_sm or fg.CTAS_PER_SM),
              **fg._CONSTANTS, **strides(in_place, layout, heads), **family_constants(family)}
    return compile_gluon_kernel(fg._flush_kernel, consts)


def compile_gluon_kernel(fn, consts: dict):
    """A Gluon kernel compiled for sm_90a at NUM_WARPS warps. Its pointer and integer arguments
    must carry the flush kernel's names (their types come from POINTERS); every other argument
    is a constexpr taken from ``consts`` (extra entries are ignored; a missing one raises
    KeyError)."""
    from triton.experimental.gluon._runtime import GluonASTSource

    from leapquant.flush.gluon_kernel import NUM_WARPS

    params = [p.name for p in fn.params]
    missing = [n for n in params if n not in POINTERS and n not in consts]
    if missing:
        raise KeyError(f"no value for the constexprs {missing} of {fn.__name__}")
    sig = {name: "constexpr" if name in consts else POINTERS.get(name, "constexpr") for name in params}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(params)
             if n in POINTERS and n not in consts and n not in ("q0", "idx", "picks", "num_programs", "pick_stride")}
    src = GluonASTSource(fn, sig, constexprs={(params.index(k),): v for k, v in consts.items() if k in params},
                         attrs=attrs)
    from leapquant.flush import gluon_kernel as fg

    options = {"num_warps": NUM_WARPS, **({"maxnreg": fg.MAX_REGISTERS} if fg.MAX_REGISTERS else {})}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def nvidia_tool(name: str) -> str:
    """Path of a CUDA binary utility Triton ships (cuobjdump, nvdisasm, ptxas)."""
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def resource_usage(cubin: bytes) -> str:
    """Registers, stack (spills) and SASS instruction mix through the cuobjdump Triton ships."""
    tool = nvidia_tool("cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
    line = [ln.strip() for ln in res.splitlines() if "REG:" in ln]
    ops = [ln.split(";")[0].split()[1] for ln in sass.splitlines() if ln.strip().startswith("/*") and "*/" in ln
           and len(ln.split("*/", 1)[1].split()) > 0 for _ in [0]]
    mix = {op: sum(1 for o in ops if o.startswith(op)) for op in ("HGMMA", "HMMA", "LDL", "STL", "BAR", "SHFL", "LDS", "STS", "F2F", "I2F", "F2I")}
    return f"{line[0] if line else res}\nSASS instructions {len(ops)}: " + " ".join(f"{k}={v}" for k, v in mix.items())


def barriers_by_line(cubin: bytes) -> list:
    """[(count, "file:line", source text)] of the BAR instructions of a cubin, by source line
    (static counts: a line in a loop or a helper called from several places counts once per copy)."""
    import collections
    import importlib.util

    spec = importlib.util.spec_from_file_location("ncu_lines", os.path.join(os.path.dirname(__file__), "ncu_lines.py"))
    lines = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lines)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvidia_tool("nvdisasm"), "-g", "-c", f.name], capture_output=True, text=True).stdout
    counts = collections.Counter(where or ("?", 0) for where, op in lines.line_table(text).values()
                                 if op and op.startswith("BAR"))
    sources = {path: open(path).read().splitlines() if os.path.exists(path) else [] for path, _ in counts}
    return [(n, f"{os.path.basename(path)}:{line}",
             sources[path][line - 1].strip() if 0 < line <= len(sources[path]) else "")
            for (path, line), n in sorted(counts.items())]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-warps", type=int, default=flush.NUM_WARPS)
    ap.add_argument("--in-place", action="store_true", help="the pool form (pool strides)")
    ap.add_argument("--tile", type=int, default=None,
                    help="with --gluon --in-place: the flag-scan tile (default the largest; a pool call of N "
                         "candidates runs launch.flag_tile(N))")
    ap.add_argument("--dump", default=None)
    ap.add_argument("--gluon", action="store_true", help="the Gluon kernel instead of the portable one")
    ap.add_argument("--step", action="store_true", help="a decode-step kernel instead of a flush kernel (with --gluon: the Gluon one)")
    ap.add_argument("--barriers", action="store_true", help="also list the barriers by source line")
    ap.add_argument("--layout", choices=("packed", "request"), default="packed", help="the pool form's layout")
    ap.add_argument("--heads", type=int, default=H, help="the pool form's head count")
    ap.add_argument("--ctas-per-sm", type=int, default=0, help="the Gluon flush's CTAs an SM (0: its own)")
    ap.add_argument("--family", choices=tuple(FAMILIES), default="kda", help="the model family's build")
    args = ap.parse_args()
    family = FAMILIES[args.family]
    if args.tile is not None and not (args.gluon and args.in_place and not args.step):
        ap.error("--tile applies to the Gluon flush's pool form: --gluon --in-place")
    if args.gluon:
        require_verified_gluon()
    if args.step:
        k = compile_step(args.in_place, args.gluon, args.layout, args.heads, family)
    else:
        k = (compile_gluon(args.in_place, args.tile, args.layout, args.heads, args.ctas_per_sm, family) if args.gluon
             else compile_kernel(args.num_warps, args.in_place, layout=args.layout, heads=args.heads, family=family))
    print(f"num_warps={k.metadata.num_warps} shared={k.metadata.shared} bytes")
    print(resource_usage(k.asm["cubin"]))
    if args.barriers:
        for n, where, source in barriers_by_line(k.asm["cubin"]):
            print(f"{n:3d} BAR  {where:28s} {source[:90]}")
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        for ext, text in k.asm.items():
            mode = "wb" if isinstance(text, bytes) else "w"
            with open(os.path.join(args.dump, f"{'step' if args.step else 'flush'}.{ext}"), mode) as f:
                f.write(text)


if __name__ == "__main__":
    main()
