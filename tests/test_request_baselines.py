"""The engine loop's layers on the requests' kernels (eval/request_baselines.py), on the CPU with
stand-in request modules of the same interface: every layer's state lands in its slots of the one
shared pool, the step's pool holds the flush's tensors, and each layer's ids move to its slots."""

import pytest
import torch

from leapquant.eval import request_baselines
from leapquant.family import FAMILIES
from leapquant.gdn import Pool as GDNPool
from leapquant.kda import Pool as KDAPool

STAND_IN = '''
import torch
HV, K, V, L, R = 32, 128, 128, 16, 4
calls = []

class Pool:
    def __init__(self, num_slots, device="cpu"):
        NS = num_slots
        self.codes = torch.zeros(NS, HV, V, K, dtype=torch.int8)
        self.s_k, self.s_v = torch.zeros(NS, HV, K), torch.zeros(NS, HV, V)
        self.uq = torch.zeros(NS, HV, R, K + V, dtype=torch.float16)
        self.kbuf = torch.zeros(NS, HV, L, K, dtype=torch.bfloat16)
        self.ubuf = torch.zeros(NS, HV, L, V, dtype=torch.bfloat16)
        self.w = torch.zeros(NS, HV, L)
        self.hcnt = torch.zeros(NS, HV, dtype=torch.int32)
        if GATE == "kda":
            self.gbuf, self.pcum = torch.ones(NS, HV, L, K, dtype=torch.float16), torch.zeros(NS, HV, K)
        else:
            self.p = torch.ones(NS, HV, 1)

def step_inplace(pool, idx, mixed, a, b, A_log, dt_bias, o):
    calls.append(("step", pool, idx.clone(), a.shape, dt_bias.shape))

def flush_inplace(pool, idx, q0):
    calls.append(("flush", pool, idx.clone()))
'''


@pytest.mark.parametrize("family,Pool", [("kda", KDAPool), ("gdn", GDNPool)])
def test_layers_land_in_their_slots_of_one_pool(tmp_path, monkeypatch, family, Pool):
    for op in ("step", "flush"):
        folder = tmp_path / f"conless-leapquant-{family}-{op}"
        folder.mkdir()
        (folder / "baseline.py").write_text(f"GATE = {family!r}\n" + STAND_IN)
    monkeypatch.setattr(request_baselines, "SLOTS", 3 * 6)  # small: 3 layers of 6 slots
    monkeypatch.setattr(request_baselines, "LAYER_SLOTS", 6)
    request_baselines.baseline.cache_clear()
    fam = FAMILIES[family]
    pools = Pool.layers(3, 5, "cpu")
    gen = torch.Generator().manual_seed(0)
    for layer, pool in enumerate(pools):
        pool.codes.copy_(torch.randint(-127, 128, pool.codes.shape, generator=gen, dtype=torch.int8))
        pool.w.uniform_(generator=gen)
        pool.hcnt.fill_(layer + 3)
    assert request_baselines.available(str(tmp_path), fam)
    lay = request_baselines.Layers(str(tmp_path), pools, fam)
    fp, sp = lay.flush_pool, lay.step_pool
    for layer, pool in enumerate(pools):
        part = slice(layer * 6, layer * 6 + 5)
        assert torch.equal(fp.codes[part], pool.codes) and torch.equal(fp.w[part], pool.w)
        assert torch.equal(fp.hcnt[part], pool.hcnt)
    assert all(getattr(sp, n) is getattr(fp, n) for n in ("codes", "kbuf", "w", "hcnt", *fam.window))
    idx = torch.tensor([1, 0, 4, -1], dtype=torch.int32)
    H, N = 32, idx.numel()
    a = torch.zeros(N, H, dtype=torch.bfloat16) if fam.scalar_gate else torch.zeros(N, H, 128, dtype=torch.bfloat16)
    dt_bias = torch.zeros(H) if fam.scalar_gate else torch.zeros(H, 128)
    lay.decode(2, idx, None, a, None, None, dt_bias, None, None)
    calls = lay.step_mod.calls + lay.flush_mod.calls
    assert [c[2].tolist() for c in calls] == [[13, 0, 16, 0]] * 2  # layer 2 starts at slot 12
    assert calls[0][1] is sp and calls[1][1] is fp
    if fam.scalar_gate:  # the requests' trailing 1 of GDN's gate inputs
        assert calls[0][3] == (N, H, 1) and calls[0][4] == (H, 1)
    assert not request_baselines.available(str(tmp_path / "none"), fam)
    request_baselines.baseline.cache_clear()
