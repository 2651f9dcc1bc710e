"""The checkpoint and window tensors: their dtypes and shapes, decoding, argument checks.

Source: the LeapQuant paper (arXiv 2609.38166) and the NVlabs/kda request
`requests/conless-leapquant-kda-flush` (SPEC sections 3 and 5).
"""

from __future__ import annotations

import torch

from .family import KDA
from .geometry import HEAD_COUNTS, H, K, QMAX, R, V

# name -> (dtype, trailing shape after the leading [B, H]); the order is run()'s.
CHECKPOINT_FIELDS: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {
    "codes": (torch.int8, (V, K)),
    "s_k": (torch.float32, (K,)),
    "s_v": (torch.float32, (V,)),
    "u": (torch.float16, (R, K)),
    "q": (torch.float16, (R, V)),
}
WINDOW_FIELDS = KDA.window_fields()  # KDA's window (each family's: family.py)
Q0_FIELD = (torch.float32, (V, R))
# the decode step's per-program inputs beside the checkpoint and window (NVlabs/kda request
# conless-leapquant-kda-step): fill count, this token's q / k / v, gate and beta pre-activations
TOKEN_FIELDS: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {
    "h": (torch.int32, ()),
    "qx": (torch.bfloat16, (K,)),
    "kx": (torch.bfloat16, (K,)),
    "vx": (torch.bfloat16, (V,)),
    "a": (torch.bfloat16, (K,)),
    "b": (torch.bfloat16, ()),
}


def mixed_width(heads: int = H) -> int:
    """Elements of one KDA ``step_inplace`` row ``mixed`` for ``heads`` heads: q for every head,
    then k, then v (``family.Family.mixed_width``)."""
    return KDA.mixed_width(heads)


MIXED_WIDTH = mixed_width(H)


def decode(codes, s_k, s_v, u, q, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decode a checkpoint to the state it stands for.

    ``S[v, k] = sum_r q[r, v] * u[r, k] + codes[v, k] * s_k[k] / 127 * s_v[v]``
    (LeapQuant, arXiv 2609.38166; NVlabs/kda request conless-leapquant-kda-flush).

    Args:
        codes: int8 ``[..., V, K]``.
        s_k: fp32 ``[..., K]`` key (column) scales.
        s_v: fp32 ``[..., V]`` value (row) scales.
        u: fp16 ``[..., R, K]`` and q: fp16 ``[..., R, V]``, the Compensator Tokens.
        dtype: floating dtype of the result and of every intermediate (fp32 for the kernels'
            own checks, fp64 for the criterion's rebuild; any torch floating dtype is accepted).

    Returns:
        ``[..., V, K]`` tensor of ``dtype`` on the inputs' device.

    Raises: nothing of its own; it does not validate its inputs (shapes that do not broadcast
    raise torch's RuntimeError).
    """
    residual = codes.to(dtype) * (s_k.to(dtype) / QMAX).unsqueeze(-2) * s_v.to(dtype).unsqueeze(-1)
    return residual + torch.einsum("...rv,...rk->...vk", q.to(dtype), u.to(dtype))


def check_tensor(name: str, t, dtype: torch.dtype, trailing: tuple[int, ...], lead: int = 0):
    """Raise TypeError/ValueError naming ``name`` unless ``t`` is a ``dtype`` tensor of shape
    ``[*trailing]`` (``lead=0``) or ``[B, H, *trailing]`` (``lead=2``)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {t.dtype}")
    shape = tuple(t.shape)
    if len(shape) != lead + len(trailing) or shape[lead:] != trailing:
        dims = ["B", "H"][:lead] + [str(d) for d in trailing]
        raise ValueError(f"{name} must have shape [{', '.join(dims)}], got {list(shape)}")


def check_batch(fields: dict[str, torch.Tensor], specs: dict | None = None) -> tuple[int, int, torch.device]:
    """Check a batch of per-program inputs: every ``fields[name]`` has the dtype and trailing
    shape ``specs[name]`` gives (default: the flush's checkpoint and window), shape
    ``[B, NH, ...]`` with one batch size ``B``, one head count ``NH`` of ``HEAD_COUNTS`` and one
    device.

    Returns ``(B, NH, device)``. Raises TypeError for a wrong type or dtype, ValueError for a
    wrong shape, a head count outside ``HEAD_COUNTS``, a batch size or head count that disagrees
    between inputs, or mixed devices.
    """
    specs = specs or {**CHECKPOINT_FIELDS, **WINDOW_FIELDS}
    batch = heads = device = None
    for name, (dtype, trailing) in specs.items():
        t = fields[name]
        check_tensor(name, t, dtype, trailing, lead=2)
        if heads is None and t.shape[1] not in HEAD_COUNTS:
            raise ValueError(f"{name} must have one of {HEAD_COUNTS} heads in dim 1, got {t.shape[1]}")
        if heads is not None and t.shape[1] != heads:
            raise ValueError(f"head counts disagree: codes has {heads} heads, {name} has {t.shape[1]}")
        if batch is None:
            batch, heads, device = t.shape[0], t.shape[1], t.device
        elif t.shape[0] != batch:
            raise ValueError(f"batch sizes disagree: codes has {batch}, {name} has {t.shape[0]}")
        elif t.device != device:
            raise ValueError(f"devices disagree: codes is on {device}, {name} is on {t.device}")
    return batch, heads, device


def check_q0(q0, device: torch.device) -> None:
    """q0 must be a contiguous fp32 ``[V, R]`` tensor on ``device``."""
    check_tensor("q0", q0, *Q0_FIELD, lead=0)
    if q0.device != device:
        raise ValueError(f"q0 is on {q0.device}, expected {device}")
    if not q0.is_contiguous():
        raise ValueError("q0 must be contiguous")


class full_fp32_matmul:
    """Context manager: matrix products on CUDA in full fp32 (no TF32) inside it, the previous
    setting restored after. The fp32 definitions (``flush.naive``, ``step.naive``) run in it."""

    def __enter__(self):
        self._prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self._prev
