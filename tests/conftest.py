import pytest
import torch

from leapquant.eval import flush_inputs as inputs
from leapquant.kda import Pool

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def fill_pool(pool: Pool, family: str = "random", seed: int = 0) -> dict:
    """Give every slot >= 1 of ``pool`` a checkpoint and window of ``family``; returns the inputs."""
    x = inputs.make(family, pool.num_slots - 1, pool.device, seed)
    for view, name in zip(pool.checkpoint + pool.window, inputs.FLUSH_ARGS):
        view[1:] = x[name]
    return x


def snapshot(pool: Pool) -> dict:
    """Copies of every pool tensor, to compare bit by bit after a flush."""
    names = ("raw", "kbuf", "ubuf", "w", "pcum", "gbuf", "hcnt")
    return {n: getattr(pool, n).clone() for n in names}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN patterns in ``raw`` compare equal to themselves)."""
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    dt = ints[a.element_size()]
    return a.shape == b.shape and torch.equal(a.contiguous().view(dt), b.contiguous().view(dt))
