"""Evaluation code, apart from what serving engines import: the input families and accuracy
criteria of the flush and the step, and the shared pieces of the command-line reports.

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush and
conless-leapquant-kda-step.
"""
