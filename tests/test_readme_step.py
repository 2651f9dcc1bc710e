"""README's decode-step snippet runs as written (on the GPU where there is one, else on CPU) and
leaves the pool as its comments say: 32 tokens on 8 sequences, two windows filled and flushed."""

import pathlib

import torch

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_decode_step_snippet_runs_as_written():
    text = README.read_text()
    start = text.index("```python", text.index("## The decode step")) + len("```python\n")
    code = text[start : text.index("```", start)]
    scope: dict = {}
    exec(compile(code, "README.md (decode step)", "exec"), scope)
    pool, idx, o = scope["pool"], scope["idx"], scope["o"]
    L = pool.kbuf.shape[-2]
    slots = idx.long()
    assert torch.isfinite(o.float()).all() and (o != 0).any()
    assert (pool.hcnt[slots] == L).all()  # token 32 filled the second window, and it was flushed
    assert (pool.w[slots] == 0).all() and (pool.gbuf[slots] == 1).all()
    assert scope["k_row"].shape == scope["x"]["kx"].shape  # the functional form ran too
