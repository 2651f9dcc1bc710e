"""Offline check (sm_90a compile, no GPU) for the flush design NOTES.md's "Next (as of the
seventeenth session)" item 1 leans on: the thin products on the integer tensor cores straight
from the int8 codes, as the step's are (there on mma.sync), here as wgmma, which takes 8-bit
operands only K-major. C y (reduce over k): A = the codes [V, K] as staged (row-major, K-major),
B = y's fixed-point digits [N, K] (K-major). C^T x (reduce over v) needs the codes' transpose
[K, V] as a second int8 operand. Compiles a probe with both products into int32 accumulators and
prints the wgmma instructions of its PTX and its shared memory.

    python scripts/experiments/check_int8_wgmma.py      (the dev extra: triton 3.6.0)
"""

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

CODES = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2))
ROWS = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0]))
ACC = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 32, 32]))
N_DIGITS = gl.constexpr(32)  # 4 columns x 8 digits


@gluon.jit
def _probe(codes, digits, out):
    c_s = gl.allocate_shared_memory(gl.int8, [128, 128], CODES)  # C [V, K], as staged
    ct_s = gl.allocate_shared_memory(gl.int8, [128, 128], CODES)  # C^T [K, V]
    d_s = gl.allocate_shared_memory(gl.int8, [N_DIGITS, 128], CODES)  # digits [N, K] (K-major B)
    r = gl.arange(0, 128, layout=gl.SliceLayout(1, ROWS))[:, None]
    c = gl.arange(0, 128, layout=gl.SliceLayout(0, ROWS))[None, :]
    rd = gl.arange(0, N_DIGITS, layout=gl.SliceLayout(1, ROWS))[:, None]
    c_s.store(gl.load(codes + r * 128 + c))
    ct_s.store(gl.load(codes + c * 128 + r))  # the transpose, by a strided load in this probe
    d_s.store(gl.load(digits + rd * 128 + c))
    fence_async_shared()
    gl.thread_barrier()
    zero = gl.zeros([128, N_DIGITS], gl.int32, ACC)
    cy = warpgroup_mma(c_s, d_s.permute((1, 0)), zero, is_async=True)  # C y: [V, N]
    ctx = warpgroup_mma(ct_s, d_s.permute((1, 0)), zero, is_async=True)  # C^T x: [K, N]
    cy, ctx = warpgroup_mma_wait(0, deps=[cy, ctx])
    ro = gl.arange(0, 128, layout=gl.SliceLayout(1, ACC))[:, None]
    co = gl.arange(0, N_DIGITS, layout=gl.SliceLayout(0, ACC))[None, :]
    gl.store(out + ro * N_DIGITS + co, cy + ctx)


def main():
    src = GluonASTSource(_probe, {"codes": "*i8", "digits": "*i8", "out": "*i32"}, constexprs={}, attrs={})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = k.asm["ptx"]
    lines = [ln.strip().split()[0] for ln in ptx.splitlines() if "wgmma.mma_async" in ln]
    print(f"compiled: {len(lines)} wgmma in the PTX ({sorted(set(lines))}), shared {k.metadata.shared} B")


if __name__ == "__main__":
    main()
