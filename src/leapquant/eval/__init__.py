"""Evaluation helpers of the decode step: input families and the element-wise criterion."""
