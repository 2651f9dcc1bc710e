"""``python -m leapquant.precision`` end to end on the CPU path (run() = the fp32 PyTorch flush)."""

import json
import math

import pytest

from leapquant import precision
from leapquant.eval import flush_criterion as criterion
from leapquant.eval import flush_inputs as inputs

REQUIRED = ("family", "batch_size", "worst_ratio_head", "worst_ratio_batch_head", "median_ratio_batch_head",
            "rel_error", "rel_error_reference", "heads_under_cap", "codes_identical", "scales_identical", "ok")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("precision")
    paths = {k: str(d / f"precision.{k}") for k in ("json", "md", "png")}
    rc = precision.main(["--device", "cpu", "--batch-sizes", "1", "--json", paths["json"],
                         "--markdown", paths["md"], "--histogram", paths["png"]])
    with open(paths["json"]) as f:
        return rc, json.load(f), paths


def test_exit_status_and_one_record_per_family(outputs):
    rc, data, _ = outputs
    assert rc == 0
    assert data["env"]["device"] == "cpu" and data["env"]["torch"]
    fams = [c["family"] for c in data["cases"]]
    assert sorted(fams) == sorted(inputs.all_families())
    for c in data["cases"]:
        assert set(REQUIRED) <= set(c), set(REQUIRED) - set(c)
        assert c["batch_size"] == 1 and c["ok"] is True


def test_cpu_candidate_is_close_to_the_reference(outputs):
    _, data, _ = outputs
    cases = {c["family"]: c for c in data["cases"]}
    # run() on the CPU is the reference with the kernel's departures, which change nothing on
    # these families but rounding: nearly the same checkpoint
    for fam in ("random", "deep_decay"):
        c = cases[fam]
        assert c["codes_identical"] > 0.99 and c["scales_identical"] > 0.9, fam
        assert abs(c["rel_error"] / c["rel_error_reference"] - 1) < 1e-3
        assert abs(c["worst_ratio_batch_head"] - 1) < 1e-3
    for fam in inputs.FAMILIES:
        c = cases[fam]
        assert c["worst_ratio_batch_head"] <= 1.01
        # int8 residual after a rank-4 fit: a few tenths of a percent of mean|S|
        assert math.isfinite(c["rel_error"]) and 0 < c["rel_error"] < 0.05
    assert cases["structured"]["heads_under_cap"] >= 1  # the zero / rank-1 edge heads are captured
    # the stress families: the reference's fp16 tokens overflow (null error) or lose the state
    assert cases["coherent_huge"]["rel_error_reference"] is None and cases["coherent_huge"]["rel_error"] < 1e-4
    assert cases["tiny_state"]["worst_ratio_batch_head"] <= 1.01


def test_markdown_and_histogram(outputs):
    _, _, paths = outputs
    with open(paths["md"]) as f:
        md = f.read()
    for fam in inputs.all_families():
        assert f"| {fam} | 1 |" in md
    assert "bitwise identical" in md and "torch" in md
    pytest.importorskip("matplotlib")
    with open(paths["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_stress_families_are_picked_up(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "STRESS_FAMILIES", ("extra",), raising=False)
    monkeypatch.setitem(inputs.BUILDERS, "extra", inputs.BUILDERS["random"])
    out = tmp_path / "p.json"
    assert precision.main(["--device", "cpu", "--batch-sizes", "1", "--json", str(out)]) == 0
    fams = [c["family"] for c in json.loads(out.read_text())["cases"]]
    assert fams == [*inputs.FAMILIES, "extra"]


def test_failing_case_gives_nonzero_exit(tmp_path, monkeypatch):
    real = precision.accuracy_case

    def damaged(family, B, device, seed):
        x, cand, ref, _ = real(family, B, device, seed)
        cand = (cand[0] // 2, *cand[1:])  # halve every code: far outside the 1.01 bound
        return x, cand, ref, criterion.evaluate(x, cand, ref)

    monkeypatch.setattr(precision, "accuracy_case", damaged)
    out = tmp_path / "p.json"
    assert precision.main(["--device", "cpu", "--batch-sizes", "1", "--json", str(out)]) == 1
    cases = [c for c in json.loads(out.read_text())["cases"] if c["family"] in inputs.FAMILIES]
    assert not any(c["ok"] for c in cases)
    assert all(c["codes_identical"] < 0.5 for c in cases)
