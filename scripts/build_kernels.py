"""Generate the Hugging Face ``kernels`` build tree (``build/torch-cpu``, ``build/torch-cuda``) from
``src/leapquant``, or check that a generated tree is what it would generate. The tree is never
committed (``.gitignore``): run this before loading the checkout through ``kernels`` and when
publishing to the Hub, so that the package's source exists in one place only.

    python scripts/build_kernels.py          # rewrite build/torch-* from src/leapquant
    python scripts/build_kernels.py --check  # write nothing; list the differences, exit 1 if any

``kernels`` 0.17.2 loads a Python-only kernel from a *noarch* variant directory
``build/torch-<backend>`` picked by the backend torch was built for (``torch-cuda`` under a CUDA
build, ``torch-cpu`` under a CPU build): it reads ``metadata.json`` there and imports the
directory's ``__init__.py`` as a package named by the metadata's ``id``. So each variant directory
here is a byte-for-byte copy of the ``leapquant`` package plus that ``metadata.json``; the two
variants differ only in the metadata's backend. ``get_kernel(...).kda`` is then ``leapquant.kda``
(the Triton kernel under CUDA, the PyTorch flush on CPU tensors, as with ``pip install``).

Only the ``build/torch-*`` directories belong to this script; anything else under ``build/`` (for
instance setuptools' ``build/lib`` from ``pip wheel .``) is left alone, and ``kernels`` skips such
names when it lists variants.

Source of the kernel itself: LeapQuant (arXiv 2609.38166); NVlabs/kda request
conless-leapquant-kda-flush.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "src" / "leapquant"
BUILD = REPO / "build"

NAME = "leapquant"  # the kernel's name; kernels imports the package under the metadata id, not this
VERSION = 1  # the major version that get_kernel("<org>/leapquant", version=1) asks for
LICENSE = "Apache-2.0"  # as pyproject.toml
# torch-cuda: a CUDA build of torch (Pool/run on cuda tensors launch the Triton kernel);
# torch-cpu: a CPU build (the PyTorch flush). The package is the same Python for both.
BACKENDS = ("cpu", "cuda")
VARIANT_PREFIX = "torch-"


def _skipped(rel: Path) -> bool:
    """Byte code and caches are not part of the package (and kernels never downloads them)."""
    return "__pycache__" in rel.parts or rel.suffix in (".pyc", ".pyo")


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` as {posix path relative to root: bytes}, without byte code."""
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not _skipped(p.relative_to(root))}


def content_tag(files: dict[str, bytes]) -> str:
    """First 10 hex digits of a SHA-256 over the package's paths and bytes.

    It goes into the metadata id (the name the package is imported under), so two different
    builds loaded in one process do not share modules, and it changes only when the source does."""
    h = hashlib.sha256()
    for path, data in sorted(files.items()):
        h.update(path.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:10]


def metadata(backend: str, tag: str) -> bytes:
    """``metadata.json`` of one variant, in the fields kernels 0.17.2 requires (name, id, version,
    license, python-depends, backend). ``python-depends`` stays empty: kernels accepts only the
    names in its own list there (torch and triton are not among them; pip installs them)."""
    meta = {
        "name": NAME,
        "id": f"_{NAME}_{backend}_{tag}",
        "version": VERSION,
        "license": LICENSE,
        "python-depends": [],
        "backend": {"type": backend},
    }
    return (json.dumps(meta, indent=2) + "\n").encode()


def expected_tree(source: Path = SOURCE) -> dict[str, bytes]:
    """The build tree generated from ``source``: {"torch-<backend>/<path>": bytes}."""
    package = read_tree(source)
    if "__init__.py" not in package:
        raise FileNotFoundError(f"no package at {source}")
    tag = content_tag(package)
    tree = {}
    for backend in BACKENDS:
        variant = VARIANT_PREFIX + backend
        tree.update({f"{variant}/{path}": data for path, data in package.items()})
        tree[f"{variant}/metadata.json"] = metadata(backend, tag)
    return tree


def actual_tree(build: Path = BUILD) -> dict[str, bytes]:
    """What is under the ``build/torch-*`` directories now, keyed as in ``expected_tree``."""
    tree = {}
    for variant in sorted(build.glob(VARIANT_PREFIX + "*")):
        if variant.is_dir():
            tree.update({f"{variant.name}/{path}": data for path, data in read_tree(variant).items()})
    return tree


def differences(expected: dict[str, bytes], actual: dict[str, bytes]) -> list[str]:
    """One line per file that is missing, differs or should not be there; empty when in sync."""
    lines = [f"missing: build/{p}" for p in sorted(expected.keys() - actual.keys())]
    lines += [f"differs: build/{p}" for p in sorted(expected.keys() & actual.keys()) if expected[p] != actual[p]]
    lines += [f"not generated: build/{p}" for p in sorted(actual.keys() - expected.keys())]
    return lines


def write(expected: dict[str, bytes], build: Path = BUILD) -> None:
    """Replace every ``build/torch-*`` directory by the generated tree (nothing else is touched)."""
    for variant in build.glob(VARIANT_PREFIX + "*"):
        if variant.is_dir():
            shutil.rmtree(variant)
        else:
            variant.unlink()
    for path, data in expected.items():
        out = build / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    """Command line; returns the exit status (1 for ``--check`` with differences)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if build/ differs from src")
    args = ap.parse_args(argv)
    expected = expected_tree()
    if args.check:
        diff = differences(expected, actual_tree())
        for line in diff:
            print(line)
        if diff:
            print("build/ is out of date: run python scripts/build_kernels.py", file=sys.stderr)
        return 1 if diff else 0
    write(expected)
    print(f"wrote {len(expected)} files under {BUILD.relative_to(REPO)}/ ({', '.join(VARIANT_PREFIX + b for b in BACKENDS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
