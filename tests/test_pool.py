"""Pool layout byte by byte (SPEC section 7), and flush_inplace / run semantics on the CPU path."""

import numpy as np
import pytest
import torch

from leapquant.eval import flush_inputs as inputs
from leapquant.kda import H, K, L, R, V, Pool, decode, flush_inplace, run, slot_nbytes
from leapquant.flush.naive import flush_cpu
from leapquant.geometry import POOL_OFFSET_WORDS as OFF

from conftest import fill_pool, same_bits, snapshot


def region_start(pool, slot, head) -> int:
    """Byte offset of program (slot, head)'s checkpoint region in ``pool.raw``: the packed layout's
    19,456-byte regions back to back, or SPEC section 7's (the request's layout)."""
    if pool.layout == "packed":
        return (slot * pool.heads + head) * 19456
    return 4 * (OFF + slot * (pool.heads + 1) * V * K + head * V * K)


def region_bytes(pool, slot, head):
    raw = pool.raw.numpy().view(np.uint8).reshape(-1)
    start = region_start(pool, slot, head)
    return raw[start : start + 19456]


@pytest.mark.parametrize("layout", ["packed", "request"])
def test_pool_sizes_and_initial_values(layout):
    pool = Pool(3, "cpu", layout=layout)
    assert pool.raw.dtype == torch.float32 and pool.layout == layout
    if layout == "request":  # SPEC section 7
        assert pool.raw.numel() == 3 * 33 * V * K + 12288
    else:  # one 19,456-byte checkpoint a program, nothing else
        assert tuple(pool.raw.shape) == (3, H, 19456 // 4)
    assert float(pool.raw.abs().sum()) == 0
    expect = {"kbuf": (torch.bfloat16, (3, H, L, K), 0), "ubuf": (torch.bfloat16, (3, H, L, V), 0),
              "w": (torch.float32, (3, H, L), 0), "pcum": (torch.float32, (3, H, K), 0),
              "gbuf": (torch.float16, (3, H, L, K), 1), "hcnt": (torch.int32, (3, H), 0),
              "errors": (torch.int32, (2,), 0)}
    for name, (dtype, shape, value) in expect.items():
        t = getattr(pool, name)
        assert t.dtype == dtype and tuple(t.shape) == shape and t.is_contiguous()
        assert bool((t == value).all()), name
    tensors = [pool.raw, pool.kbuf, pool.ubuf, pool.w, pool.pcum, pool.gbuf, pool.hcnt, pool.errors]
    assert pool.nbytes == sum(t.numel() * t.element_size() for t in tensors)  # CPU: no kernel scratch


def test_slot_cost_is_half_an_fp32_state():
    # bytes a slot at 32 heads: the packed layout's checkpoint + window + fill count + the flush's
    # 4-byte pick a program, against fla's fp32 state [H, K, V] (2,097,152 B)
    assert slot_nbytes() == H * (19456 + 12864 + 4 + 4) == 1_034_496 <= 1.04e6
    assert slot_nbytes(H, "request") == 33 * V * K * 4 + H * (12864 + 4 + 4) == 2_574_592
    assert slot_nbytes(4) == slot_nbytes() // 8
    pool = Pool(9, "cpu")
    assert pool.nbytes == 9 * (slot_nbytes() - 4 * H) + 8  # CPU pools hold no picks; the 8-byte counter


@pytest.mark.parametrize("layout,heads", [("packed", 32), ("request", 32), ("packed", 4)])
def test_pool_views_land_at_their_offsets(layout, heads):
    pool = Pool(3, "cpu", heads=heads, layout=layout)
    g = torch.Generator().manual_seed(0)
    slot, head = 2, heads - 1
    codes = torch.randint(-127, 128, (V, K), generator=g).to(torch.int8)
    s_k, s_v = torch.rand(K, generator=g), torch.rand(V, generator=g)
    u, q = torch.randn(R, K, generator=g).half(), torch.randn(R, V, generator=g).half()
    pool.codes[slot, head], pool.s_k[slot, head], pool.s_v[slot, head] = codes, s_k, s_v
    pool.u[slot, head], pool.q[slot, head] = u, q
    b = region_bytes(pool, slot, head)
    assert np.array_equal(b[:16384].view(np.int8).reshape(V, K), codes.numpy())
    assert np.array_equal(b[16384:16896].view(np.float32), s_k.numpy())
    assert np.array_equal(b[16896:17408].view(np.float32), s_v.numpy())
    uq = b[17408:19456].view(np.float16).reshape(R, K + V)
    assert np.array_equal(uq[:, :K], u.numpy()) and np.array_equal(uq[:, K:], q.numpy())
    # nothing else in raw changed: the spare head and every other region are zero
    touched = np.zeros(pool.raw.numel() * 4, dtype=bool)
    start = region_start(pool, slot, head)
    touched[start : start + 19456] = True
    assert not pool.raw.numpy().view(np.uint8).reshape(-1)[~touched].any()
    assert pool.uq.shape == (3, heads, R, K + V)


def test_pool_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_slots"):
        Pool(1, "cpu")
    with pytest.raises(ValueError, match="num_slots"):
        Pool(1)  # the size is checked before the device
    with pytest.raises(TypeError, match="num_slots"):
        Pool(2.0, "cpu")
    for ctas in (0, 0.5, 3):  # the flush's CTAs an SM: None, 1 or 2
        with pytest.raises(ValueError, match="flush_ctas_per_sm"):
            Pool(2, "cpu", flush_ctas_per_sm=ctas)
    assert Pool(2, "cpu", flush_ctas_per_sm=1).flush_ctas_per_sm == 1


def _due_pool(seed=0):
    pool = Pool(5, "cpu")
    fill_pool(pool, "random", seed)
    pool.hcnt[1] = L
    pool.hcnt[2, ::2] = L  # half the heads of slot 2 due
    pool.hcnt[2, 1::4] = 7
    pool.hcnt[3] = L  # slot 3 due but not selected
    pool.hcnt[4] = 3
    return pool


def test_flush_inplace_flushes_exactly_the_due_programs():
    pool = _due_pool()
    before = snapshot(pool)
    q0 = inputs.make("random", 1, "cpu", seed=9)["q0"]
    idx = torch.tensor([0, 2, -1, 1, 4], dtype=torch.int32)
    flush_inplace(pool, idx, q0)
    due = torch.zeros(5, H, dtype=torch.bool)
    due[1] = True
    due[2, ::2] = True
    assert_flushed_exactly(pool, before, due, q0)


def assert_flushed_exactly(pool, before, due, q0):
    """Flushed programs hold the CPU flush of their old state and window, bit for bit, and their
    window is reset; every other byte of the pool is as ``before``; hcnt never changes."""
    slot, head = due.nonzero(as_tuple=True)
    expected = Pool(pool.num_slots, "cpu")
    expected.raw.copy_(before["raw"])
    for n in ("kbuf", "ubuf", "w", "pcum", "gbuf"):
        getattr(expected, n).copy_(before[n])
    want = flush_cpu(*(t[slot, head] for t in expected.checkpoint), *(t[slot, head] for t in expected.window), q0)
    for view, exp in zip(expected.checkpoint, want):
        view[slot, head] = exp
    assert same_bits(pool.raw, expected.raw)
    assert bool((pool.w[due] == 0).all() and (pool.gbuf[due] == 1).all() and (pool.pcum[due] == 0).all())
    assert torch.equal(pool.hcnt, before["hcnt"])
    keep = ~due
    for n in ("kbuf", "ubuf"):
        assert same_bits(getattr(pool, n), before[n])
    for n in ("w", "pcum", "gbuf"):
        assert same_bits(getattr(pool, n)[keep], before[n][keep])


def test_flush_inplace_with_nothing_due_changes_nothing():
    pool = _due_pool()
    pool.hcnt.fill_(0)
    before = snapshot(pool)
    flush_inplace(pool, torch.tensor([1, 2, 3, 4], dtype=torch.int32), torch.randn(V, R))
    for n, t in before.items():
        assert same_bits(getattr(pool, n), t), n


def test_run_returns_fresh_tensors_and_leaves_inputs_alone():
    x = inputs.make("structured", 1, "cpu", seed=2)
    copies = {n: t.clone() for n, t in x.items()}
    out = run(**x)
    for n in x:
        assert torch.equal(x[n], copies[n]), n
    for new, name in zip(out, inputs.CHECKPOINT_ARGS):
        assert new.data_ptr() != x[name].data_ptr()
    for a, b in zip(out, flush_cpu(**x)):
        assert torch.equal(a, b)


def test_run_does_not_depend_on_memory_layout():
    # the same values laid out column-major (codes, kbuf) or as a strided batch view give the same bits
    x = inputs.make("random", 2, "cpu", seed=6)
    dense = run(**x)
    y = dict(x)
    for name in ("codes", "kbuf", "gbuf"):
        y[name] = x[name].transpose(-1, -2).contiguous().transpose(-1, -2)
    assert not y["codes"].is_contiguous()
    for a, b in zip(dense, run(**y)):
        assert same_bits(a, b)
    doubled = {n: (torch.stack([t, t], 1).flatten(0, 1) if n != "q0" else t) for n, t in x.items()}
    strided = {n: (t[::2] if n != "q0" else t) for n, t in doubled.items()}
    for a, b in zip(dense, run(**strided)):
        assert same_bits(a, b)


def test_bad_arguments_name_the_argument():
    x = inputs.make("random", 1, "cpu")
    with pytest.raises(TypeError, match="codes"):
        run(**{**x, "codes": x["codes"].float()})
    with pytest.raises(ValueError, match="ubuf"):
        run(**{**x, "ubuf": x["ubuf"][..., :64]})
    with pytest.raises(ValueError, match="batch size"):
        run(**{**x, "w": torch.cat([x["w"], x["w"]])})
    with pytest.raises(ValueError, match="q0"):
        run(**{**x, "q0": x["q0"].t().contiguous().t()})
    pool = Pool(2, "cpu")
    with pytest.raises(TypeError, match="idx"):
        flush_inplace(pool, torch.tensor([1]), x["q0"])
    with pytest.raises(ValueError, match="contiguous"):
        flush_inplace(pool, torch.tensor([1, 0, 1, 0], dtype=torch.int32)[::2], x["q0"])
    with pytest.raises(ValueError, match="idx"):
        pool.check_index(torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match="more than once"):
        Pool(3, "cpu").check_index(torch.tensor([1, 1, 0, 0], dtype=torch.int32))


def test_decode_matches_spec_formula():
    x = inputs.make("random", 1, "cpu")
    S = decode(*(x[n] for n in inputs.CHECKPOINT_ARGS), dtype=torch.float64)
    c, sk, sv = x["codes"][0, 0].double(), x["s_k"][0, 0].double(), x["s_v"][0, 0].double()
    u, q = x["u"][0, 0].double(), x["q"][0, 0].double()
    v, k = 7, 100
    expect = sum(q[r, v] * u[r, k] for r in range(R)) + c[v, k] * sk[k] / 127 * sv[v]
    assert abs(float(S[0, 0, v, k] - expect)) < 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_flush_inplace_any_selection_pattern(seed):
    g = torch.Generator().manual_seed(seed)
    pool = Pool(7, "cpu")
    fill_pool(pool, "random", seed)
    pool.hcnt.copy_(torch.randint(0, L + 1, (7, H), generator=g, dtype=torch.int32))
    perm = torch.randperm(6, generator=g)[: 3 + seed] + 1
    idx = torch.cat([perm, torch.tensor([0, -1])])[torch.randperm(len(perm) + 2, generator=g)].to(torch.int32)
    before = snapshot(pool)
    q0 = torch.randn(V, R, generator=g)
    flush_inplace(pool, idx, q0)
    due = torch.zeros(7, H, dtype=torch.bool)
    due[perm] = before["hcnt"][perm] == L
    assert_flushed_exactly(pool, before, due, q0)


def test_more_bad_arguments():
    x = inputs.make("random", 1, "cpu")
    with pytest.raises(TypeError, match="q0"):
        run(**{**x, "q0": x["q0"].double()})
    with pytest.raises(ValueError, match="q0"):
        run(**{**x, "q0": x["q0"][:64]})
    with pytest.raises(ValueError, match="heads"):
        run(**{**x, "s_k": x["s_k"].expand(1, 32, 128)[:, :16]})
    with pytest.raises(TypeError, match="gbuf"):
        run(**{**x, "gbuf": x["gbuf"].float()})
    with pytest.raises(TypeError, match="kbuf"):
        run(**{**x, "kbuf": [1, 2]})
    pool = Pool(2, "cpu")
    with pytest.raises(TypeError, match="pool"):
        flush_inplace("pool", torch.zeros(1, dtype=torch.int32), x["q0"])
    with pytest.raises(ValueError, match="1-D"):
        flush_inplace(pool, torch.zeros(1, 1, dtype=torch.int32), x["q0"])
