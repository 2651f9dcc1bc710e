"""The Gluon kernel compiles for sm_90a on a machine without a GPU, under the triton releases it
is checked to compile with (``launch.GLUON_COMPILES_WITH``; the `dev` extra pins one); skipped
under other triton releases, whose Gluon API differs. Catches an API break before a device run
does."""

import functools
import importlib.util
import os
import re

import pytest
import triton

from leapquant import kernel
from leapquant.launch import GLUON_COMPILES_WITH

flush_gluon = pytest.importorskip("leapquant.flush.gluon_kernel")
pytestmark = pytest.mark.skipif(triton.__version__ not in GLUON_COMPILES_WITH,
                                reason=f"Gluon kernels compile-checked with triton {' or '.join(GLUON_COMPILES_WITH)}, "
                                       f"this is {triton.__version__}: pip install -e '.[dev]'")

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "scripts")
# the most spilled bytes (STACK) each release's build may have: none under the verified release;
# under the newer ones what their compilers gave when the kernels were checked (the flush's worst
# variant, the step's), so that a regression still shows. Releases whose generated code spills
# run the Gluon kernels only after their self-check on the GPU (kernel.decide).
SPILLS = {"3.6.0": (0, 0), "3.7.0": (32, 0), "3.7.1": (32, 0), "3.8.0": (168, 136), "3.9.0": (8, 120)}
FLUSH_SPILLS, STEP_SPILLS = SPILLS.get(triton.__version__, (0, 0))


@functools.lru_cache(maxsize=None)
def _script(name, folder=SCRIPTS):
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _compile_sm90():
    return _script("compile_sm90")


def _usage(c, k) -> dict:
    return dict(f.split(":") for f in c.resource_usage(k.asm["cubin"]).split("\n")[0].split() if ":" in f)


POOL_BUILDS = [(t, "packed", 32) for t in flush_gluon.pool_tiles()] + [(512, "request", 32), (512, "packed", 4),
                                                                        (2048, "packed", 16)]


@pytest.mark.parametrize("in_place,tile,layout,heads", [(False, None, "packed", 32)] + [(True, *b) for b in POOL_BUILDS],
                         ids=["functional"] + [f"pool-tile{t}-{lay}-{h}heads" for t, lay, h in POOL_BUILDS])
def test_gluon_kernel_compiles_for_sm90a_with_wgmma_and_fits_shared_memory(in_place, tile, layout, heads):
    # the functional form and every pool build a call may run (one per flag-scan tile), in both
    # layouts and at fewer heads (other strides and head counts: other builds of the one kernel)
    c = _compile_sm90()
    k = c.compile_gluon(in_place, tile, layout, heads)
    assert "wgmma.mma_async" in k.asm["ptx"]
    assert "cp.async" in k.asm["ptx"]  # the next program's inputs are staged
    assert k.metadata.shared <= 227 * 1024  # an H100/H200 block's shared-memory limit
    # no spills under the verified release: two CTAs an SM at 255 registers leave no room for them
    assert int(_usage(c, k)["STACK"]) <= FLUSH_SPILLS


def test_bytes_only_probe_compiles_with_the_kernels_staging():
    # scripts/experiments/bytes_only.py: the flush kernel's copies and stores without its math
    probe = _script("bytes_only", os.path.join(SCRIPTS, "experiments"))
    c = _compile_sm90()
    k = c.compile_gluon_kernel(probe._move_bytes_kernel, {**c.DENSE_STRIDES, **flush_gluon._CONSTANTS,
                                                          "CTAS": c.H200_SMS})
    assert "cp.async" in k.asm["ptx"]  # the staging of the flush kernel
    assert "st.global" in k.asm["ptx"]  # its checkpoint stores and window resets
    assert "wgmma" not in k.asm["ptx"]  # and none of its math
    assert k.metadata.shared <= 227 * 1024


def test_gluon_is_never_chosen_off_hopper():
    assert kernel.choose("cpu") == "triton"
    assert kernel.runnable("cpu") == kernel.runnable("cpu", "step") == ("triton",)


STEP_BUILDS = [(False, "packed", 32), (True, "packed", 32), (True, "request", 32), (True, "packed", 4)]


@pytest.mark.parametrize("in_place,layout,heads", STEP_BUILDS,
                         ids=["functional", "pool-packed", "pool-request", "pool-packed-4heads"])
def test_gluon_step_compiles_for_sm90a_within_its_register_cap(in_place, layout, heads):
    # (the packed layout's pool form carries the full-window guard)
    from leapquant.step import gluon_kernel as step_gluon

    k = _compile_sm90().compile_step(in_place, gluon=True, layout=layout, heads=heads)
    ptx = k.asm["ptx"]
    assert "cp.async" in ptx  # the codes and window are staged in shared memory
    # the codes products on the integer tensor cores, fed by ldmatrix; no fp32 conversion of the codes
    assert "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32" in ptx and "ldmatrix" in ptx
    usage = _usage(_compile_sm90(), k)
    # 7 CTAs an SM (65,536 registers / (7 x 128 threads), in steps of 8), no spills under the
    # verified release
    assert int(usage["REG"]) <= step_gluon.MAX_REGISTERS <= 72 and int(usage["STACK"]) <= STEP_SPILLS
    assert 7 * (k.metadata.shared + 1024) <= 228 * 1024  # and the shared memory for 7 of them


# GDN's builds (the scalar gate, key groups: the same kernels' other compile-time switches), their
# spilled bytes as the compilers gave them when checked: (flush, step pool packed, step pool
# request, step functional) a release; the releases CI runs every build under (3.6.0, the newest)
GDN_SPILLS = {"3.6.0": (0, 0, 0, 0), "3.9.0": (0, 88, 88, 96)}
GDN_STEP_BUILDS = [(True, "packed"), (True, "request"), (False, "packed")]


@pytest.mark.skipif(triton.__version__ not in GDN_SPILLS, reason="GDN builds checked under 3.6.0 and 3.9.0")
@pytest.mark.parametrize("in_place", [True, False], ids=["gdn-pool", "gdn-fn"])
def test_gdn_flush_compiles_for_sm90a(in_place):
    from leapquant.family import GDN

    c = _compile_sm90()
    k = c.compile_gluon(in_place, 512 if in_place else None, family=GDN)
    assert "wgmma.mma_async" in k.asm["ptx"] and "cp.async" in k.asm["ptx"]
    assert k.metadata.shared <= 227 * 1024
    assert int(_usage(c, k)["STACK"]) <= GDN_SPILLS[triton.__version__][0]


@pytest.mark.skipif(triton.__version__ not in GDN_SPILLS, reason="GDN builds checked under 3.6.0 and 3.9.0")
@pytest.mark.parametrize("in_place,layout", GDN_STEP_BUILDS, ids=["gdn-pool-packed", "gdn-pool-request", "gdn-fn"])
def test_gdn_step_compiles_for_sm90a_within_its_register_cap(in_place, layout):
    from leapquant.family import GDN
    from leapquant.step import gluon_kernel as step_gluon

    c = _compile_sm90()
    k = c.compile_step(in_place, gluon=True, layout=layout, family=GDN)
    assert "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32" in k.asm["ptx"]
    usage = _usage(c, k)
    bound = GDN_SPILLS[triton.__version__][1 + GDN_STEP_BUILDS.index((in_place, layout))]
    assert int(usage["REG"]) <= step_gluon.MAX_REGISTERS and int(usage["STACK"]) <= bound
    # no per-entry gates: the scalar-gate build neither loads nor stores gbuf (fp16 [L, K] rows)
    assert k.asm["ptx"].count("cp.async") < c.compile_step(in_place, gluon=True, layout=layout).asm["ptx"].count("cp.async")


def test_barrier_census_covers_every_barrier_of_the_step():
    # scripts/compile_sm90.py --barriers: every BAR of the kernel attributed to a source line,
    # the step kernel's own among them (the source text is read from the path the cubin's line
    # table names, which a cached cubin may place elsewhere, so it is not checked)
    c = _compile_sm90()
    k = c.compile_step(True, gluon=True)
    census = c.barriers_by_line(k.asm["cubin"])
    total = int(c.resource_usage(k.asm["cubin"]).split("BAR=")[1].split()[0])
    assert total > 0 and sum(n for n, _, _ in census) == total
    assert any(where.startswith("gluon_kernel.py:") for _, where, _ in census)  # the kernel's own lines


# a memdesc's element widths in bits, for the staged buffers' sizes
_BITS = {"i8": 8, "bf16": 16, "f16": 16, "f32": 32}


def _function_body(ir: str, header: str) -> list:
    """The lines of the function ``tt.func HEADER...`` in an MLIR dump, up to the next function."""
    return ir.split(f"tt.func {header}", 1)[1].split("\n  tt.func", 1)[0].splitlines()


def _allocations(ir: str, function: str) -> dict:
    """name -> (offset, bytes or None) of every shared-memory allocation in ``function``'s body
    in an MLIR dump taken after the shared-memory allocation (bytes for local_alloc's buffers,
    None for the scratch of layout changes and reductions, whose size the IR does not print)."""
    found = {}
    for n, line in enumerate(_function_body(ir, f"private @\"{function}")):
        m = re.search(r"allocation\.offset = (\d+)", line)
        if not m:
            continue
        alloc = re.match(r"\s*%(\w+) = ttg\.local_alloc .*memdesc<([\dx]+)x(\w+),", line)
        if alloc:
            size = _BITS[alloc.group(3)] // 8
            for d in alloc.group(2).split("x"):
                size *= int(d)
            found[alloc.group(1)] = (int(m.group(1)), size)
        else:
            found[f"scratch@{n}"] = (int(m.group(1)), None)
    return found


@pytest.mark.parametrize("in_place", [False, True], ids=["functional", "pool"])
def test_staging_buffer_shares_no_memory_with_the_program(monkeypatch, capfd, tmp_path, in_place):
    # The next program's inputs are copied into the staging buffer stage_s of the not-inlined
    # _flush_program while it computes (Triton 3.6 lays a not-inlined function's scratch from
    # offset 0 whatever its caller holds, so every buffer lives in the callee): the copies land
    # during the call and are read by the next one, so no other allocation of the call may use
    # its memory, and the kernel's loop around the calls may allocate nothing (its scratch would
    # land on it). Conservative: every other allocation of the call starts after it (the
    # scratch's sizes are not printed).
    monkeypatch.setenv("MLIR_ENABLE_DUMP", "1")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compile afresh: the dump comes from the passes
    _compile_sm90().compile_gluon(in_place)
    dump = capfd.readouterr().err
    ir = dump.split("IR Dump Before TritonTensorMemoryAllocationPass", 1)[1].split("IR Dump Before", 1)[0]
    allocs = _allocations(ir, "leapquant.flush.gluon_kernel._flush_program")
    assert allocs.pop("stage_s") == (0, 32768)  # the allocator put it lowest
    assert allocs and min(offset for offset, _ in allocs.values()) >= 32768, sorted(allocs.items(), key=lambda a: a[1][0])
    # the kernel's loop over its programs (control flow is in blocks by then): from the block the
    # back edge after the call returns to, to that back edge
    lines = _function_body(ir, "public @_flush_kernel")
    call = next(n for n, line in enumerate(lines) if "tt.call" in line)
    back = next(n for n in range(call, len(lines)) if "cf.br ^bb" in lines[n])
    target = re.search(r"cf\.br (\^bb\d+)", lines[back]).group(1)
    head = max(n for n in range(call) if lines[n].strip().startswith(target))
    # (the call itself carries the offset of the callee's memory: 0, all of it)
    assert call - head < 40 and "allocation.offset = 0 " in lines[call]
    assert not [line for line in lines[head:back] if "allocation.offset" in line and "tt.call" not in line]
