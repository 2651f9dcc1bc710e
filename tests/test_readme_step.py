"""README's engine loop and its GDN block run as written (on the GPU where there is one, else on
the CPU) and leave the pools as their comments say: 20 tokens, every window filled and flushed
once, 4 entries since."""

import pathlib

import torch

from leapquant.family import GDN

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def run_snippets(*headings: str) -> dict:
    """The first ```python block under each README heading, run in order in one scope (as a reader
    pastes them); returns the scope."""
    text = README.read_text()
    scope: dict = {}
    for heading in headings:
        start = text.index("```python", text.index(heading)) + len("```python\n")
        code = text[start : text.index("```", start)]
        exec(compile(code, f"README.md ({heading.lstrip('# ')})", "exec"), scope)
    return scope


def test_engine_loop_snippet_runs_as_written():
    scope = run_snippets("## The engine's loop")
    pools, idx, o = scope["pools"], scope["idx"], scope["o"]
    scope["overlap"].close()  # a deferred flush, if any
    slots = idx.long()
    assert torch.isfinite(o.float()).all() and (o != 0).any()
    for pool in pools:
        assert (pool.hcnt[slots] == 4).all()  # 16 tokens filled the window, it was flushed, 4 more since
        assert (pool.w[slots][..., 4:] == 0).all() and (pool.w[slots][..., :4] == 1).all()
        assert int(pool.errors.sum()) == 0  # no step met a full window


def test_gdn_snippet_runs_after_the_engine_loop():
    # README's GDN block continues the KDA loop's names (dev, N, H, idx, q0, o)
    scope = run_snippets("## The engine's loop", "## Gated DeltaNet (Qwen3.5)")
    pool, idx, o = scope["pool"], scope["idx"], scope["o"]
    slots = idx.long()
    assert pool.family is GDN and torch.isfinite(o.float()).all() and (o != 0).any()
    assert (pool.hcnt[slots] == 4).all()  # 20 tokens: a window filled, flushed, 4 entries since
    w = pool.w[slots]
    assert (w[..., 4:] == 0).all() and (w[..., 3] == 1).all() and (w[..., :3] < 1).all()  # decayed
    assert (pool.p[slots] < 1).all() and int(pool.errors.sum()) == 0
