"""The flush launchers pass every kernel argument by name (``launch.flush_arguments`` plus each
kernel's own switches), checked on the CPU against each kernel's parameter list: a renamed or
missing argument fails here, not first on a GPU."""

import contextlib
import functools

import pytest
import torch
import triton

from leapquant.kda import Pool
from leapquant.pool import warm_up_slots
from leapquant.flush import triton_kernel

LAUNCH_OPTIONS = {"num_warps", "num_stages", "maxnreg"}


class _Capture:
    """Stands in for a kernel: ``kernel[grid](**kwargs)`` records the keywords."""

    def __init__(self):
        self.kwargs = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            assert not args, "arguments are passed by name"
            self.kwargs = kwargs
        return launch


def _launch_kwargs(monkeypatch, module, idx: torch.Tensor | None = None) -> dict:
    """The keywords ``module.launch_flush`` passes its kernel on a 3-slot CPU pool: a pool call
    over ``idx`` (int32 slot ids), or the functional form without it."""
    capture = _Capture()
    monkeypatch.setattr(module, "_flush_kernel", capture)
    monkeypatch.setattr(module.torch.cuda, "device", lambda d: contextlib.nullcontext())
    pool = Pool(3, "cpu")
    q0 = torch.randn(128, 4)
    if idx is not None:
        module.launch_flush(pool.checkpoint, pool.checkpoint, pool.window, q0, idx=idx, hcnt=pool.hcnt)
    else:
        module.launch_flush(pool.checkpoint, tuple(torch.empty_like(t) for t in pool.checkpoint), pool.window, q0)
    return capture.kwargs


def _launched_names(monkeypatch, module, in_place: bool) -> tuple[set, list]:
    params = [p.name for p in module._flush_kernel.params]
    idx = torch.tensor([1, 2], dtype=torch.int32) if in_place else None
    return set(_launch_kwargs(monkeypatch, module, idx)) - LAUNCH_OPTIONS, params


def _flush_module(name: str):
    if name == "triton":
        return triton_kernel
    gluon_kernel = pytest.importorskip("leapquant.flush.gluon_kernel")
    if triton.__version__ not in gluon_kernel.VERIFIED_TRITON:
        pytest.skip(f"Gluon kernel verified with triton {gluon_kernel.VERIFIED_TRITON} (the `dev` extra installs it)")
    return gluon_kernel


@pytest.mark.parametrize("in_place", [False, True], ids=["functional", "pool"])
def test_portable_flush_launch_names_every_argument(monkeypatch, in_place):
    names, params = _launched_names(monkeypatch, triton_kernel, in_place)
    assert names == set(params)


@pytest.mark.parametrize("in_place", [False, True], ids=["functional", "pool"])
def test_gluon_flush_launch_names_every_argument(monkeypatch, in_place):
    names, params = _launched_names(monkeypatch, _flush_module("gluon"), in_place)
    assert names == set(params)


@pytest.mark.parametrize("name", ["triton", "gluon"])
def test_pool_warm_up_builds_every_flag_tile_a_call_can_use(monkeypatch, name):
    # Pool._warm_up launches one padding idx per length in warm_up_slots, so that no later call
    # compiles: those launches must reach every tile the kernel's launcher picks for any call
    module = _flush_module(name)
    zeros = functools.partial(torch.zeros, dtype=torch.int32)
    built = {_launch_kwargs(monkeypatch, module, zeros(n))["TILE"] for n in warm_up_slots(name)}
    assert built == set(module.pool_tiles())
    for n in (1, 2, 16, 17, 64, 65, 256, 257, 512, 600):  # calls over n slots
        assert _launch_kwargs(monkeypatch, module, zeros(n))["TILE"] in built, n
    assert _launch_kwargs(monkeypatch, module)["TILE"] == module.FLAG_TILE  # the functional form: one build


def test_gluon_pool_call_scans_the_smallest_tile_that_holds_it(monkeypatch):
    module = _flush_module("gluon")
    for slots, tile in ((2, 512), (16, 512), (17, 2048), (256, 8192), (600, module.FLAG_TILE)):
        assert _launch_kwargs(monkeypatch, module, torch.zeros(slots, dtype=torch.int32))["TILE"] == tile, slots


def test_flag_tile_is_the_smallest_variant_that_covers_the_call():
    from leapquant.launch import FLAG_TILE, flag_tile, flag_tiles

    assert flag_tiles() == [512, 2048, 8192, FLAG_TILE]
    assert [flag_tile(n) for n in (1, 512, 513, 2048, 2049, 8192, 8193, FLAG_TILE)] == \
        [512, 512, 2048, 2048, 8192, 8192, FLAG_TILE, FLAG_TILE]
    assert flag_tile(FLAG_TILE + 1) == FLAG_TILE  # several tiles of the largest
    assert flag_tiles(64) == [64] and flag_tile(5000, 64) == 64  # a patched largest tile caps every choice
    assert flag_tiles(1024) == [512, 1024] and flag_tile(600, 1024) == 1024
