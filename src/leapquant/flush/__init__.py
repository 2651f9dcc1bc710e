"""The LeapQuant KDA flush (SPEC section 4): ``naive`` (the fp32 PyTorch definition and the CPU
path), ``triton_kernel`` (the portable kernel) and ``gluon_kernel`` (the Hopper kernel). Engines
call it through ``leapquant.kda.run`` / ``flush_inplace``; ``leapquant.kernel`` picks the
kernel.

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
"""
