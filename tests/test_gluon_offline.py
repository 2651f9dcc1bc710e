"""The Gluon kernel compiles for sm_90a on a machine without a GPU, under the triton releases it
was verified with (the `dev` extra pins one); skipped under other triton releases, whose Gluon
API differs. Catches an API break before a device run does."""

import importlib.util
import os

import pytest
import triton

from leapquant.kda import kernel

flush_gluon = pytest.importorskip("leapquant.kda.flush_gluon")
pytestmark = pytest.mark.skipif(triton.__version__ not in flush_gluon.VERIFIED_TRITON,
                                reason=f"Gluon kernel verified with triton {flush_gluon.VERIFIED_TRITON}")

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "compile_sm90.py")


def _compile_sm90():
    spec = importlib.util.spec_from_file_location("compile_sm90", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("in_place", [False, True], ids=["functional", "pool"])
def test_gluon_kernel_compiles_for_sm90a_with_wgmma_and_fits_shared_memory(in_place):
    k = _compile_sm90().compile_gluon(in_place)
    assert "wgmma.mma_async" in k.asm["ptx"]
    assert "cp.async" in k.asm["ptx"]  # the next program's inputs are staged
    assert k.metadata.shared <= 227 * 1024  # an H100/H200 block's shared-memory limit


def test_gluon_is_never_chosen_off_hopper():
    assert kernel.choose("cpu") == "triton"
