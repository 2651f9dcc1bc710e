"""Per-token KDA decode step on LeapQuant checkpoints: the readable reference and CPU path
(``naive``), the portable Triton kernel (``triton_kernel``), the Gluon kernel for sm_90
(``gluon_kernel``) and the device helpers both kernels call (``tl_common``). What engines call
lives in ``leapquant.interface``."""
