import json
import os
import subprocess
import sys

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


def interpreted_verdicts(script: str, timeout: int) -> dict:
    """Run ``tests/<script>`` under ``TRITON_INTERPRET=1`` in a subprocess (the interpreter is
    picked when a kernel module is imported) with this checkout's ``src`` first on the path;
    returns the JSON object its last output line holds."""
    here = os.path.dirname(__file__)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(here, "..", "src"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, os.path.join(here, script)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
