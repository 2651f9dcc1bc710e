"""Geometry and format constants of the LeapQuant KDA checkpoint, declared once.

Source: the LeapQuant paper (arXiv 2609.38166) and the NVlabs/kda request
`requests/conless-leapquant-kda-flush`; see SPEC sections 2, 3 and 7.
"""

H = 32  # heads per sequence; one program = one (slot, head)
V = 128  # value dimension (rows of the state S[v, k])
K = 128  # key dimension (columns)
L = 16  # window length: buffered rank-1 updates per checkpoint
R = 4  # Compensator Tokens (rank of the low-rank part)

QMAX = 127  # codes live in [-QMAX, QMAX]
EPS = 1e-12  # floor of both smoothing scales
NORM_FLOOR = 1e-30  # Gram-Schmidt divides by max(norm, NORM_FLOOR)
# Product-path departures from the reference (naive.flush_cpu and the kernel):
DEPENDENT_COLUMN = 2.0**-40  # a GS column keeping less of its squared norm is replaced by e_r
TOKEN_LIMIT = 2.0**14  # max|u_r| above this moves powers of two from u_r to q_r (fp16 max 65504)
# a basis column keeping less than this of its squared norm (columns conditioned beyond ~1e4), or a
# dependent one (a zero column keeps 0 of 0): the Gluon kernel's Cholesky QR takes a second pass;
# on the unit-scaled qk path, the reference's path
ILL_COLUMN = 1e-8
# the scalar gate (GDN): a window whose gate product p is below this takes the reference's path
# (qk orthonormalised) at once, without the unit-scaled qk's attempt. There the state is mostly
# its last few window entries, numerically of low rank, and S S^T q0 was ill-conditioned in 71%
# (p in [1e-3, 1e-2)) to 100% (p < 1e-3) of the engine loop's flushed programs, 26% in [1e-2,
# 0.1), none above (GDN, 16 sequences, 768 programs: scripts/experiments/ill_share.py;
# docs/design.md, "The flush's path by the gate product")
ORTHONORMAL_QK_BELOW = 1e-2
# The Gluon decode step's codes products on the integer tensor cores: each thin vector f x as
# STEP_DIGITS signed digits of STEP_DIGIT_BITS bits under one power of two (55 bits below its
# largest element with eight: fp32's 24 bits for every element within 2^31 of it; step/emulation.py)
STEP_DIGITS = 8
STEP_DIGIT_BITS = 7
# the exponent e of a vector's largest element, clamped before the digits' scale 2^(5 - e): from
# -121 (the scale stays finite) to 127 (the first digit stays within 64 up to fp32's largest)
STEP_EXPONENT_RANGE = (-121, 127)

# Pool layouts, in fp32 words unless the name says bytes. "packed" (the default): each (slot,
# head) region is exactly one checkpoint, slots `heads` regions apart. "request": the layout of
# SPEC section 7 (NVlabs/kda request conless-leapquant-kda-flush), a 64 KiB region a head and
# one spare head a slot after an offset, byte-compatible with the request's harness.
LAYOUTS = ("packed", "request")
HEAD_COUNTS = (1, 2, 4, 8, 16, 32)  # heads a pool may hold: powers of two up to H (tensor parallelism)
POOL_OFFSET_WORDS = 12288  # OFF: words before slot 0 (request layout)
SLOT_WORDS = (H + 1) * V * K  # SS: 32 heads plus one spare (request layout, 32 heads)
HEAD_WORDS = V * K  # a head's region in the request layout
CODES_BYTES = 0  # byte offsets inside one (slot, head) region
SK_BYTES = V * K  # 16384
SV_BYTES = SK_BYTES + 4 * K  # 16896
UQ_BYTES = SV_BYTES + 4 * V  # 17408
REGION_BYTES = UQ_BYTES + 2 * R * (K + V)  # 19456 = one checkpoint (a multiple of 128 bytes)
REGION_WORDS = REGION_BYTES // 4  # a head's region in the packed layout
# the device-side error counter (Pool.errors), by position: programs whose step met a full window
# that was never flushed (the token was not appended), and states write_state found out of the
# domain (non-finite, or |S| >= DOMAIN_LIMIT)
ERROR_KINDS = ("full_window", "out_of_domain")
DOMAIN_LIMIT = 1e4

# Bytes one flushed program must move at least (SPEC section 9): checkpoint read and
# write, window (kbuf, ubuf, w), gate history (gbuf, pcum) and the resets (w, gbuf, pcum).
WINDOW_BYTES = 2 * L * K + 2 * L * V + 4 * L
GATE_BYTES = 2 * L * K + 4 * K
RESET_BYTES = 4 * L + 2 * L * K + 4 * K
FLOOR_BYTES_PER_PROGRAM = 2 * REGION_BYTES + WINDOW_BYTES + GATE_BYTES + RESET_BYTES

# Bytes one decode step must move per program (NVlabs/kda request conless-leapquant-kda-step):
# read the checkpoint, the window so far (kbuf, ubuf, gbuf, w, pcum), this token (q, k, v, a: K
# or V bf16 each; b: one bf16) and the fill count; write o, the appended rows (kbuf, ubuf, gbuf),
# pcum, one w word and the fill count. 34,894 B = 34.1 KiB.
STEP_READ_BYTES = REGION_BYTES + WINDOW_BYTES + 2 * L * K + 4 * K + 2 * (2 * K + V) + 2 * K + 2 + 4
STEP_WRITE_BYTES = 2 * V + 2 * K + 2 * V + 2 * K + 4 * K + 4 + 4
STEP_FLOOR_BYTES_PER_PROGRAM = STEP_READ_BYTES + STEP_WRITE_BYTES
