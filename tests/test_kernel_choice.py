"""Which kernel runs and why (``kernel.decide``), on the CPU with the device's answers stood in:
Gluon on sm_90 under a verified triton; under another release only after its self-check, a failed
one falling back to the portable kernels with one warning; the variables that force either."""

import warnings

import pytest

from leapquant import kernel as kernel_mod
from leapquant import self_check as self_check_mod


@pytest.fixture
def hopper(monkeypatch):
    """A stand-in sm_90 device whose Gluon modules import; the self-check's verdict settable."""
    monkeypatch.setattr(kernel_mod, "_hopper", lambda device: True)
    monkeypatch.setattr(kernel_mod, "_gluon_import_error", lambda: None)
    monkeypatch.setattr(kernel_mod.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100")
    monkeypatch.delenv(kernel_mod.FORCE_VARIABLE, raising=False)
    monkeypatch.delenv(kernel_mod.SELF_CHECK_VARIABLE, raising=False)
    calls = []
    verdict = {"ok": True}

    def fake_check(device, heads, layout, fail=False, family=None):
        calls.append((heads, layout, fail))
        verdict.setdefault("families", []).append(family.name)
        return (verdict["ok"] and not fail), "fake check"

    monkeypatch.setattr(self_check_mod, "self_check", fake_check)
    kernel_mod._gluon_verdict.cache_clear()
    kernel_mod._WARNED.clear()
    yield calls, verdict
    kernel_mod._gluon_verdict.cache_clear()
    kernel_mod._WARNED.clear()


def test_a_verified_release_runs_gluon_without_a_check(hopper, monkeypatch):
    calls, _ = hopper
    monkeypatch.setattr(kernel_mod, "GLUON_VERIFIED_TRITON", (kernel_mod.triton.__version__,))
    name, why = kernel_mod.decide("cuda")
    assert name == "gluon" and "verified" in why and calls == []


def test_another_release_runs_gluon_after_its_self_check(hopper, monkeypatch):
    calls, _ = hopper
    monkeypatch.setattr(kernel_mod, "GLUON_VERIFIED_TRITON", ())
    assert kernel_mod.decide("cuda", "step", heads=8, layout="request")[0] == "gluon"
    assert kernel_mod.decide("cuda", "flush", heads=8, layout="request")[0] == "gluon"
    assert calls == [(8, "request", False)]  # once a process and device


def test_a_failed_self_check_falls_back_with_one_warning(hopper, monkeypatch):
    _, verdict = hopper
    monkeypatch.setattr(kernel_mod, "GLUON_VERIFIED_TRITON", ())
    verdict["ok"] = False
    with pytest.warns(RuntimeWarning, match="portable Triton kernels run on NVIDIA H100 .* failed their "
                                            "self-check .*pip install 'torch==2.11"):
        name, why = kernel_mod.decide("cuda")
    assert name == "triton" and "fake check" in why
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel_mod.decide("cuda", "step")[0] == "triton"  # the warning is said once


def test_the_variables_force_the_check_and_the_kernel(hopper, monkeypatch):
    calls, _ = hopper
    monkeypatch.setattr(kernel_mod, "GLUON_VERIFIED_TRITON", (kernel_mod.triton.__version__,))
    monkeypatch.setenv(kernel_mod.SELF_CHECK_VARIABLE, "1")
    assert kernel_mod.decide("cuda")[0] == "gluon" and calls == [(32, "packed", False)]
    kernel_mod._gluon_verdict.cache_clear()
    monkeypatch.setenv(kernel_mod.SELF_CHECK_VARIABLE, "fail")
    with pytest.warns(RuntimeWarning):
        assert kernel_mod.decide("cuda", heads=4)[0] == "triton"
    assert calls[-1] == (4, "packed", True)
    monkeypatch.setenv(kernel_mod.FORCE_VARIABLE, "gluon")
    assert kernel_mod.decide("cuda") == ("gluon", "LEAPQUANT_KERNEL=gluon")
    monkeypatch.setenv(kernel_mod.FORCE_VARIABLE, "triton")
    assert kernel_mod.decide("cuda") == ("triton", "LEAPQUANT_KERNEL=triton")
    monkeypatch.setenv(kernel_mod.FORCE_VARIABLE, "cuda")
    with pytest.raises(ValueError, match="LEAPQUANT_KERNEL"):
        kernel_mod.decide("cuda")


def test_off_hopper_the_portable_kernel_runs_silently(monkeypatch):
    monkeypatch.delenv(kernel_mod.FORCE_VARIABLE, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        name, why = kernel_mod.decide("cpu")
    assert name == "triton" and "CPU" in why
    monkeypatch.setenv(kernel_mod.FORCE_VARIABLE, "gluon")
    with pytest.raises(ValueError, match="sm_90"):
        kernel_mod.decide("cpu")
    with pytest.raises(ValueError, match="operation"):
        kernel_mod.decide("cpu", "prefill")


def test_the_self_check_runs_the_pools_family(hopper, monkeypatch):
    # a GDN pool on a release the Gluon kernels were not run with: its own builds are checked, once
    calls, verdict = hopper
    monkeypatch.setattr(kernel_mod, "GLUON_VERIFIED_TRITON", ())
    assert kernel_mod.decide("cuda", "step", 32, "packed", family="gdn")[0] == "gluon"
    assert kernel_mod.decide("cuda", "flush", 32, "packed", family="gdn")[0] == "gluon"
    assert kernel_mod.decide("cuda", "flush", 32, "packed")[0] == "gluon"
    assert verdict["families"] == ["gdn", "kda"] and len(calls) == 2
