"""scripts/build_kernels.py generates the Hugging Face kernels tree (build/torch-*, never committed)
from src/leapquant: each variant holds the whole package and its metadata, and the check it runs
catches drift between a generated tree and the source."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_generator():
    """scripts/ is not a package: load the generator from its file, the one the command line runs."""
    spec = importlib.util.spec_from_file_location("build_kernels", REPO / "scripts" / "build_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def test_every_variant_holds_the_whole_package_and_its_metadata():
    tree = gen.expected_tree()
    package = gen.read_tree(gen.SOURCE)
    for backend in gen.BACKENDS:
        variant = f"torch-{backend}"
        assert {p for p in tree if p.startswith(variant + "/")} == {f"{variant}/{p}" for p in [*package, "metadata.json"]}
        meta = json.loads(tree[f"{variant}/metadata.json"])
        assert meta["backend"] == {"type": backend} and meta["name"] == "leapquant" and meta["version"] == 1
        assert meta["id"] == f"_leapquant_{backend}_{gen.content_tag(package)}"


@pytest.fixture()
def scratch(tmp_path):
    """A copy of the source and a build tree generated from it, to break on purpose."""
    source, build = tmp_path / "leapquant", tmp_path / "build"
    for path, data in gen.read_tree(gen.SOURCE).items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(data)
    gen.write(gen.expected_tree(source), build)
    (build / "lib").mkdir()  # setuptools' output beside it is not the generator's business
    (build / "lib" / "x.py").write_text("")
    return source, build


def test_check_reports_each_kind_of_drift(scratch):
    source, build = scratch
    assert gen.differences(gen.expected_tree(source), gen.actual_tree(build)) == []
    (build / "torch-cuda" / "pool.py").write_text("# edited by hand\n")
    (build / "torch-cpu" / "flush" / "naive.py").unlink()
    (build / "torch-cpu" / "kda" / "extra.py").write_text("")
    (build / "torch-rocm").mkdir()
    (build / "torch-rocm" / "__init__.py").write_text("")
    diff = gen.differences(gen.expected_tree(source), gen.actual_tree(build))
    assert diff == ["missing: build/torch-cpu/flush/naive.py", "differs: build/torch-cuda/pool.py",
                    "not generated: build/torch-cpu/kda/extra.py", "not generated: build/torch-rocm/__init__.py"]


def test_a_source_edit_makes_the_tree_stale_and_regenerating_fixes_it(scratch):
    source, build = scratch
    with open(source / "geometry.py", "a") as f:
        f.write("# a change\n")
    diff = gen.differences(gen.expected_tree(source), gen.actual_tree(build))
    # the copies and the metadata ids (content tag) of both variants
    assert diff == [f"differs: build/torch-{b}/{p}" for b in ("cpu", "cuda") for p in ("geometry.py", "metadata.json")]
    gen.write(gen.expected_tree(source), build)
    assert gen.differences(gen.expected_tree(source), gen.actual_tree(build)) == []
    assert (build / "lib" / "x.py").exists()


def test_byte_code_is_neither_copied_nor_checked(scratch):
    source, build = scratch
    for root in (source, build / "torch-cpu"):
        (root / "__pycache__").mkdir(exist_ok=True)
        (root / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert gen.differences(gen.expected_tree(source), gen.actual_tree(build)) == []
