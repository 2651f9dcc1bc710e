"""The Triton decode step kernel's logic on the CPU, under Triton's interpreter (a subprocess: the
interpreter is picked when the kernel module is imported)."""

import pytest

triton = pytest.importorskip("triton")

from conftest import interpreted_verdicts  # noqa: E402

FAMILIES = ("structured", "next_step", "random")


@pytest.fixture(scope="module")
def verdicts():
    return interpreted_verdicts("interpreted_step.py", timeout=600)


@pytest.mark.interpreter
@pytest.mark.parametrize("family", FAMILIES)
def test_interpreted_step_meets_criterion(verdicts, family):
    v = verdicts["functional"][family]
    assert verdicts["interpreted"]
    assert v["ok"] and v["worst"] <= 1.0, v
    assert v["inputs_unchanged"], v


@pytest.mark.interpreter
@pytest.mark.parametrize("family", ["random", "structured"])
def test_interpreted_step_pool_form(verdicts, family):
    v = verdicts[f"pool_{family}"]
    assert v["ok"] and v["worst"] <= 1.0, v  # outputs and appended entries
    assert v["zero_rows"], v  # idx 0 and -1: zero output rows
    assert v["advanced"] and v["flushed_read_as_empty"], v  # hcnt = h + 1, hcnt == L read as 0
    assert v["untouched"], v  # nothing else written, bit for bit


@pytest.mark.interpreter
def test_interpreted_step_dead_window_rows_do_not_reach_the_outputs(verdicts):
    # NaN in every kbuf / ubuf / gbuf / w row at or past h (every h from 0 to L): the same bits
    # out; a kbuf or ubuf row read there would fail it (step_checks.dead_rows_unused)
    v = verdicts["dead_rows"]
    assert v["same"] and v["finite"], v


@pytest.mark.interpreter
def test_interpreted_beta_is_correctly_rounded_for_every_bf16_input(verdicts):
    # sigmoid(b) for small bf16 b sits within a fraction of an fp32 ulp of a bf16 midpoint
    assert verdicts["beta_disagreements"] == 0


@pytest.mark.interpreter
def test_interpreted_pool_warm_up_launches_both_kernels_on_nothing(verdicts):
    # Pool._warm_up compiles and runs the flush and step kernels on slot 0; nothing changes
    assert verdicts["warm_up_untouched"]


@pytest.mark.interpreter
@pytest.mark.parametrize("heads", [32, 4])
def test_interpreted_step_keeps_and_counts_a_full_window(verdicts, heads):
    # packed layout: a full window never flushed stays as it is, counted once a program
    v = verdicts[f"full_window_{heads}"]
    assert v["kept"] and v["counted"] and v["zero_row"] and v["o_worst"] <= 1.0, v
