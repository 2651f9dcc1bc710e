"""The report commands' output options: ``--json -`` is standard output, and a path that cannot
be written is refused before any work (argparse's exit 2)."""

import json

import pytest

from leapquant import bench, precision


@pytest.mark.parametrize("main", [bench.main, precision.main], ids=["bench", "precision"])
def test_json_dash_is_standard_output(main, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--device", "cpu", "--batch-sizes", "1", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    payload = json.loads(out)  # stdout holds the JSON alone
    assert payload["env"]["torch"]
    assert "PASS" in err  # the progress lines and tables went to stderr
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("main", [bench.main, precision.main], ids=["bench", "precision"])
def test_unwritable_json_path_fails_before_the_work(main, capsys, tmp_path, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the work started before the output path was checked")

    monkeypatch.setitem(main.__globals__, "_report", no_work)
    with pytest.raises(SystemExit) as stop:
        main(["--device", "cpu", "--json", str(tmp_path / "missing" / "x.json")])
    assert stop.value.code == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("fill", [-1, 16])
def test_time_step_refuses_a_fill_count_outside_the_window(fill):
    # fill counts 0 .. L - 1 only (a negative one would append before the program's window)
    with pytest.raises(ValueError, match="fill count"):
        bench.time_step(1, "cpu", fill=fill)


@pytest.mark.parametrize("pads", [-1, 4])
def test_time_step_refuses_a_pad_count_outside_the_batch(pads):
    # pad rows 0 .. B - 1 only: at least one row steps a sequence
    with pytest.raises(ValueError, match="pad rows"):
        bench.time_step(4, "cpu", pads=pads)
