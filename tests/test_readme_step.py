"""README's engine loop runs as written (on the GPU where there is one, else on the CPU) and leaves
the pools as its comments say: 20 tokens, every window filled and flushed once, 4 entries since."""

import pathlib

import torch

from leapquant.family import GDN

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_engine_loop_snippet_runs_as_written():
    text = README.read_text()
    start = text.index("```python", text.index("## The engine's loop")) + len("```python\n")
    code = text[start : text.index("```", start)]
    scope: dict = {}
    exec(compile(code, "README.md (the engine's loop)", "exec"), scope)
    pools, idx, o = scope["pools"], scope["idx"], scope["o"]
    scope["overlap"].close()  # a deferred flush, if any
    slots = idx.long()
    assert torch.isfinite(o.float()).all() and (o != 0).any()
    for pool in pools:
        assert (pool.hcnt[slots] == 4).all()  # 16 tokens filled the window, it was flushed, 4 more since
        assert (pool.w[slots][..., 4:] == 0).all() and (pool.w[slots][..., :4] == 1).all()
        assert int(pool.errors.sum()) == 0  # no step met a full window


def test_gdn_snippet_runs_after_the_engine_loop():
    # README's GDN block continues the KDA loop's names (dev, N, H, idx, q0, o): both blocks run in
    # one scope, as a reader pastes them
    text = README.read_text()
    blocks = []
    for heading in ("## The engine's loop", "## Gated DeltaNet (Qwen3.5)"):
        start = text.index("```python", text.index(heading)) + len("```python\n")
        blocks.append(text[start : text.index("```", start)])
    scope: dict = {}
    for name, code in zip(("the engine's loop", "Gated DeltaNet"), blocks):
        exec(compile(code, f"README.md ({name})", "exec"), scope)
    pool, idx, o = scope["pool"], scope["idx"], scope["o"]
    slots = idx.long()
    assert pool.family is GDN and torch.isfinite(o.float()).all() and (o != 0).any()
    assert (pool.hcnt[slots] == 4).all()  # 20 tokens: a window filled, flushed, 4 entries since
    w = pool.w[slots]
    assert (w[..., 4:] == 0).all() and (w[..., 3] == 1).all() and (w[..., :3] < 1).all()  # decayed
    assert (pool.p[slots] < 1).all() and int(pool.errors.sum()) == 0
