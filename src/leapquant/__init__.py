"""leapquant: LeapQuant quantized recurrent states for linear attention (arXiv 2609.38166)."""

__version__ = "0.1.0"
