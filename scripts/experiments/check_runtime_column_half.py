"""Offline check (sm_90a compile, no GPU) for blocks of E under a runtime loop (NOTES.md, "Next
(as of the sixteenth session)", item 1): can a runtime `if` choose one of the two constexpr column
halves of an NVMMA [128, 128] bf16 operand, for a register load and as a wgmma B operand? Compiles
a probe kernel with a runtime trip count and prints the counts of wgmma and shared loads in its
PTX (one loop body: 2 wgmma, for M = 128 as two m64).

    python scripts/experiments/check_runtime_column_half.py      (the dev extra: triton 3.6.0)
"""

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

OPERAND = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2))
ROWS = gl.constexpr(gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0]))
ACC64 = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16]))


@gluon.jit
def _probe(x, n):
    c_s = gl.allocate_shared_memory(gl.bfloat16, [128, 128], OPERAND)  # as the codes [V, K]
    ku_s = gl.allocate_shared_memory(gl.bfloat16, [16, 128], OPERAND)  # as KU's rows [16, K]
    a_s = gl.allocate_shared_memory(gl.bfloat16, [16, 128], OPERAND)  # as A's rows [16, V]
    r = gl.arange(0, 128, layout=gl.SliceLayout(1, ROWS))[:, None]
    r16 = gl.arange(0, 16, layout=gl.SliceLayout(1, ROWS))[:, None]
    c = gl.arange(0, 128, layout=gl.SliceLayout(0, ROWS))[None, :]
    c_s.store(gl.load(x + r * 128 + c).to(gl.bfloat16))
    ku_s.store(gl.load(x + r16 * 128 + c).to(gl.bfloat16))
    a_s.store(gl.load(x + r16 * 128 + c + 1).to(gl.bfloat16))
    fence_async_shared()
    gl.thread_barrier()
    rr = gl.arange(0, 128, layout=gl.SliceLayout(1, ACC64))[:, None]
    cc = gl.arange(0, 64, layout=gl.SliceLayout(0, ACC64))[None, :]
    for j in range(n):  # runtime trip count: one body
        if j == 0:
            cb = c_s.slice(0, 64, 1)
            kb = ku_s.slice(0, 64, 1)
        else:
            cb = c_s.slice(64, 64, 1)
            kb = ku_s.slice(64, 64, 1)
        e = cb.load(ACC64).to(gl.float32) * 0.5  # a block of E's dequantised codes
        e = warpgroup_mma(a_s.permute((1, 0)), kb, e, is_async=True)  # plus a low-rank product
        e = warpgroup_mma_wait(0, deps=[e])
        gl.store(x + rr * 128 + j * 64 + cc, e)


def main():
    src = GluonASTSource(_probe, {"x": "*fp32", "n": "i32"}, constexprs={}, attrs={})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    print(f"compiled: {ptx.count('wgmma.mma_async')} wgmma, {ptx.count('ld.shared')} ld.shared, "
          f"{ptx.count('ldmatrix')} ldmatrix in the PTX")


if __name__ == "__main__":
    main()
