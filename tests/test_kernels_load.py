"""leapquant loaded through Hugging Face kernels from this checkout's build/ tree, generated here
by scripts/build_kernels.py (nothing is downloaded) is the same kda module as the pip-installed package, bit for bit: run's CPU path and a
CPU Pool flush here, the Triton kernel as well where CUDA is available."""

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# the test extra brings both; elsewhere (a GPU box with only the runtime) the module skips
huggingface_hub = pytest.importorskip("huggingface_hub")
kernels = pytest.importorskip("kernels")

import leapquant
from conftest import fill_pool, requires_cuda, same_bits, snapshot
from leapquant.eval import flush_inputs as inputs
from leapquant.kda import L

REPO = Path(__file__).resolve().parents[1]
# kernels picks the noarch variant of the backend torch was built for
VARIANT = REPO / "build" / ("torch-cuda" if torch.version.cuda else "torch-cpu")


@pytest.fixture(scope="module")
def kernel():
    """The package as ``kernels.get_local_kernel`` loads it from the checkout's freshly generated
    build tree, with the Hub offline (a fallback to the Hub would raise instead of downloading)."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "build_kernels.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        return kernels.get_local_kernel(REPO)


def test_loads_the_build_variant_not_the_installed_package(kernel):
    assert kernels.__version__ == "0.17.2"
    assert Path(kernel.__file__) == VARIANT / "__init__.py"
    assert kernel.__name__ != "leapquant" and kernel.kda is not leapquant.kda
    source = Path(inspect.getsourcefile(kernel.kda.flush_inplace)).resolve()
    assert source.is_relative_to(VARIANT.resolve())


def test_exposes_the_public_api_of_leapquant_kda(kernel):
    assert kernel.kda.__all__ == leapquant.kda.__all__
    for name in leapquant.kda.__all__:
        mine, theirs = getattr(kernel.kda, name), getattr(leapquant.kda, name)
        assert type(mine).__qualname__ == type(theirs).__qualname__, name
        if isinstance(theirs, int):  # the geometry constants
            assert mine == theirs, name
        else:  # functions, Pool, inputs: the build tree's own copies
            assert mine is not theirs, name
    assert kernel.__version__ == leapquant.__version__


def test_pools_of_the_two_modules_are_not_interchangeable(kernel):
    q0 = inputs.make("random", 1, "cpu")["q0"]
    idx = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(TypeError, match="Pool"):
        leapquant.kda.flush_inplace(kernel.kda.Pool(2, "cpu"), idx, q0)


def test_get_kernel_with_local_kernels_resolves_to_the_checkout(kernel, monkeypatch):
    """The Hub line ``get_kernel("<org>/leapquant", version=1)`` with LOCAL_KERNELS pointing at the
    checkout: the same module (kernels caches it by variant directory); any repo id works."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("LOCAL_KERNELS", f"org/leapquant={REPO}")
    assert kernels.get_kernel("org/leapquant", version=1) is kernel


@pytest.mark.parametrize("family", ["random", "structured"])
def test_run_cpu_path_bit_equal_to_the_installed_package(kernel, family):
    x = inputs.make(family, 2, "cpu", seed=3)
    ours = kernel.kda.run(**{n: t.clone() for n, t in x.items()})
    theirs = leapquant.kda.run(**x)
    assert len(ours) == len(theirs) == 5
    for name, a, b in zip(inputs.CHECKPOINT_ARGS, ours, theirs):
        assert a.device.type == "cpu" and same_bits(a, b), name


def _flush_both(kernel, device):
    """The same pool contents and the same call through both modules; returns both snapshots and
    the one before the flush."""
    pools = [kernel.kda.Pool(5, device), leapquant.kda.Pool(5, device)]
    for pool in pools:
        fill_pool(pool, "random", seed=5)
        pool.hcnt[1] = L
        pool.hcnt[2, ::2] = L  # half the heads due
        pool.hcnt[3] = L  # due, but not selected below
        pool.hcnt[4] = 3
    before = snapshot(pools[0])
    q0 = inputs.make("random", 1, device, seed=6)["q0"]
    idx = torch.tensor([2, 0, 1, -1, 4], dtype=torch.int32, device=device)
    kernel.kda.flush_inplace(pools[0], idx, q0)
    leapquant.kda.flush_inplace(pools[1], idx, q0)
    return snapshot(pools[0]), snapshot(pools[1]), before


def test_pool_flush_cpu_bit_equal_to_the_installed_package(kernel):
    ours, theirs, before = _flush_both(kernel, "cpu")
    assert not same_bits(ours["raw"], before["raw"])  # something was flushed
    for name in ours:
        assert same_bits(ours[name], theirs[name]), name


@requires_cuda
@pytest.mark.gpu
def test_triton_kernel_from_the_build_tree_bit_equal_on_cuda(kernel):
    """On a CUDA build of torch the torch-cuda variant is loaded and launches its own copy of the
    Triton kernel."""
    x = inputs.make("random", 3, "cuda", seed=7)
    ours, theirs = kernel.kda.run(**x), leapquant.kda.run(**x)
    for name, a, b in zip(inputs.CHECKPOINT_ARGS, ours, theirs):
        assert a.is_cuda and same_bits(a, b), name
    flush_module = sys.modules[kernel.__name__ + ".kda.flush.triton_kernel"]
    assert Path(flush_module.__file__).resolve().is_relative_to(VARIANT.resolve())
    ours, theirs, before = _flush_both(kernel, "cuda")
    assert not same_bits(ours["raw"], before["raw"])
    for name in ours:
        assert same_bits(ours[name], theirs[name]), name


def test_documented_snippet_runs_from_the_checkout():
    """docs/kernels.md's snippet, as ``python -c`` from the repository root."""
    section = (REPO / "docs" / "kernels.md").read_text()
    code = re.search(r"python -c '\n(.*?)\n'\n", section, re.S).group(1)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    variant = "cuda" if torch.version.cuda else "cpu"
    assert re.fullmatch(rf"_leapquant_{variant}_[0-9a-f]{{10}}\.kda {dev} \(4, 32, 128, 128\) windows reset: True\n",
                        done.stdout), done.stdout
