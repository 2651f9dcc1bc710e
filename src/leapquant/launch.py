"""What the flush and step kernels (portable Triton and Gluon) share on the host side: the grid of
resident CTAs, the pool's scratch, checkpoint strides, and the rounding constants. Neutral ground,
so that no kernel module imports another kernel's private helpers.

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush and
conless-leapquant-kda-step (the pool layout of SPEC section 7).
"""

from __future__ import annotations

import functools
import os

import torch

from .format import CHECKPOINT_FIELDS
from .geometry import DEPENDENT_COLUMN, EPS, H, K, L, NORM_FLOOR, QMAX, R, TOKEN_LIMIT, V
from .step.naive import QK_NORM_EPS, QK_SCALE, SOFTPLUS_THRESHOLD
from .step.tl_common import BETA_SERIES_BELOW

ROUND_MAGIC = 12582912.0  # 1.5 * 2**23: x + MAGIC rounds x half-to-even into the low mantissa bits
ROUND_MAGIC_BITS = 0x4B400000  # the same constant's fp32 bit pattern: int8 -> fp32 by an integer add
GLUON_VERIFIED_TRITON = ("3.6.0",)  # releases whose Gluon API both Gluon kernels were compiled and run with
# releases both Gluon kernels are checked to compile with for sm_90a offline (CI); on a GPU, a release
# outside GLUON_VERIFIED_TRITON runs them only after their self-check (kernel.py)
GLUON_COMPILES_WITH = ("3.6.0", "3.7.0", "3.7.1", "3.8.0", "3.9.0")
# the portable flush's persistent grid: one 8-warp CTA at 255 registers fills an SM (the Gluon
# kernel sets its own)
CTAS_PER_SM = 1
MOST_CTAS_PER_SM = 2  # the most CTAs an SM any persistent flush grid may run (the pool's scratch is sized for it)
FLAG_TILE = 16384  # the most due flags a resident flush CTA gathers at once: 512 slots x 32 heads
SMALLEST_FLAG_TILE = 512  # 16 slots x 32 heads
FLAG_TILE_STEP = 4  # a pool call's tile: the smallest of 512, 2048, 8192, ... (up to FLAG_TILE) that covers it


def flag_tile(num_programs: int, largest: int = FLAG_TILE) -> int:
    """Due flags a resident Gluon flush CTA gathers at once in a pool call over ``num_programs``
    candidates (its constexpr TILE; the portable kernel keeps FLAG_TILE): the smallest tile of
    ``flag_tiles(largest)`` that holds them all, else ``largest`` (the scan then loops over
    tiles). Every CTA runs the whole tile's code, masked where it has no candidates: a small call
    scanning a 16,384-flag tile paid ~1,300 instructions a warp for 16 slots (docs/experiments.md,
    "The flag scan's tile")."""
    return next((t for t in flag_tiles(largest) if t >= num_programs), largest)


def flag_tiles(largest: int = FLAG_TILE) -> list[int]:
    """Every tile ``flag_tile`` may choose (the variants a pool compiles at its warm-up)."""
    tiles = [min(SMALLEST_FLAG_TILE, largest)]
    while tiles[-1] < largest:
        tiles.append(min(tiles[-1] * FLAG_TILE_STEP, largest))
    return tiles


@functools.lru_cache(maxsize=None)
def resident_ctas(device: torch.device, per_sm: int = CTAS_PER_SM) -> int:
    """CTAs of a persistent grid on ``device``: ``per_sm`` per SM (4 off CUDA, for the
    interpreter)."""
    if device.type != "cuda":
        return 4
    return per_sm * torch.cuda.get_device_properties(device).multi_processor_count


def interpreting() -> bool:
    """True under Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def pick_words(num_programs: int, device: torch.device) -> int:
    """int32 words of scratch the persistent pool grid needs for a pool of ``num_programs``
    (slots x heads)."""
    return num_programs + resident_ctas(device, MOST_CTAS_PER_SM)


def pool_picks(num_programs: int, hcnt: torch.Tensor, ctas: int, picks: torch.Tensor | None = None):
    """``(picks, pick_stride)`` of a persistent pool grid of ``ctas`` CTAs over ``num_programs``
    candidates: due programs are at most the pool's (slots x heads), so a CTA picks at most
    ``pick_stride`` of them; ``picks`` is the caller's int32 scratch (``Pool.picks``) or a new one
    of ``pick_words`` words on ``hcnt``'s device."""
    pick_stride = -(-min(num_programs, hcnt.numel()) // ctas)
    if picks is None:
        picks = torch.empty(pick_words(hcnt.numel(), hcnt.device), dtype=torch.int32, device=hcnt.device)
    return picks, pick_stride


def checkpoint_strides(codes, s_k, s_v, u, q) -> dict:
    """Slot, head and row strides of the checkpoint tensors, as the kernels' constexpr names."""
    return dict(
        C_SLOT=codes.stride(0), C_HEAD=codes.stride(1),
        SK_SLOT=s_k.stride(0), SK_HEAD=s_k.stride(1),
        SV_SLOT=s_v.stride(0), SV_HEAD=s_v.stride(1),
        U_SLOT=u.stride(0), U_HEAD=u.stride(1), U_ROW=u.stride(2),
        Q_SLOT=q.stride(0), Q_HEAD=q.stride(1), Q_ROW=q.stride(2),
    )


def flush_arguments(ckpt_in, ckpt_out, window, q0, idx, hcnt, picks, num_programs: int, pick_stride: int) -> dict:
    """The arguments both flush kernels take, by name: the old and the new checkpoint
    (``codes_in`` .. ``q_out``; the same tensors for an in-place pool flush), the window
    (``kbuf, ubuf, gbuf, w, pcum``), ``q0``, the pool's ``idx``, ``hcnt`` and ``picks`` scratch
    (a functional launch passes any tensor in their place), the candidate programs, the picks' words
    per CTA, the checkpoint strides and ``FLUSH_CONSTANTS``; ``SCALAR_GATE`` where the window has no
``gbuf`` (None: the scalar gate, ``pcum`` its product ``p``, ``family.Family.kernel_window``). Each kernel adds its own switches
    and constants (``flush.triton_kernel.launch_flush``, ``flush.gluon_kernel.launch_flush``)."""
    names_in = ("codes_in", "sk_in", "sv_in", "u_in", "q_in")
    names_out = ("codes_out", "sk_out", "sv_out", "u_out", "q_out")
    return {**dict(zip(names_in, ckpt_in)), **dict(zip(names_out, ckpt_out)),
            **dict(zip(("kbuf", "ubuf", "gbuf", "w", "pcum"), window)), "q0": q0, "idx": idx, "hcnt": hcnt,
            "picks": picks, "num_programs": num_programs, "pick_stride": pick_stride,
            **checkpoint_strides(*ckpt_in), **FLUSH_CONSTANTS, "NH": ckpt_in[0].shape[1],
            "SCALAR_GATE": window[2] is None}


# the flush kernels' geometry and numeric constants, by their constexpr names
FLUSH_CONSTANTS = dict(NH=H, NV=V, NK=K, NL=L, NR=R, QM=float(QMAX), SCALE_MIN=EPS, NORM_MIN=NORM_FLOOR,
                       DROP=DEPENDENT_COLUMN, U_LIMIT=TOKEN_LIMIT, MAGIC=ROUND_MAGIC, MAGIC_BITS=ROUND_MAGIC_BITS)


# the step kernels' arguments not specialised on (alignment, value 1): the caller's pointers and
# row strides, so that a pool's warm-up compiles the one variant every later call runs
STEP_UNSPECIALISED = ("idx", "errors", "qx", "kx", "vx", "a", "b", "A_log", "dt_bias", "o", "qk_row", "v_row")


def step_arguments(ckpt, window, fill, token, A_log, dt_bias, o, new=None, idx=None, errors=None,
                   guard_full: bool = False, key_group: int = 1) -> dict:
    """Every argument of the decode-step kernels by name (the portable and the Gluon kernel take
    the same ones), constants included; arguments and semantics as ``step.triton_kernel.launch_step``.
    In pool form (``idx`` given) the unused output pointers are ``o``; in functional form the
    unused ``idx`` and ``errors`` are ``fill``. The head count comes from ``o`` ``[N, NH, V]``.
    A window without ``gbuf`` (None) is the scalar gate's (``SCALAR_GATE``, ``pcum`` its product
    ``p``; ``family.Family.kernel_window``), whose functional ``new`` has None for ``g_row``;
    ``key_group``: heads one key head's q and k serve (``KEY_GROUP``)."""
    qx, kx, vx, a, b = token
    kbuf, ubuf, gbuf, w, pcum = window
    in_place = idx is not None
    k_row, u_row, g_row, w_new, pcum_new = (o,) * 5 if in_place else new
    return {
        **dict(zip(CHECKPOINT_FIELDS, ckpt)), "kbuf": kbuf, "ubuf": ubuf, "gbuf": gbuf, "w": w, "pcum": pcum,
        "fill": fill, "qx": qx, "kx": kx, "vx": vx, "a": a, "b": b, "A_log": A_log, "dt_bias": dt_bias,
        "o": o, "k_row": k_row, "u_row": u_row, "g_row": g_row, "w_new": w_new, "pcum_new": pcum_new,
        "idx": idx if in_place else fill, "errors": errors if in_place and errors is not None else fill,
        "qk_row": qx.stride(0), "v_row": vx.stride(0),
        **checkpoint_strides(*ckpt), "IN_PLACE": in_place, "GUARD_FULL": in_place and guard_full,
        **STEP_CONSTANTS, "NH": o.shape[1], "SCALAR_GATE": gbuf is None, "KEY_GROUP": key_group,
    }


# the decode-step kernels' geometry and numeric constants, by their constexpr names
STEP_CONSTANTS = dict(NH=H, NV=V, NK=K, NL=L, NR=R, QM=float(QMAX), NORM_EPS=QK_NORM_EPS, SCALE=QK_SCALE,
                      SP_THRESHOLD=SOFTPLUS_THRESHOLD, BETA_SMALL=BETA_SERIES_BELOW, MAGIC=ROUND_MAGIC,
                      MAGIC_BITS=ROUND_MAGIC_BITS)
