"""Per-token KDA decode step on LeapQuant checkpoints: reference, Triton kernel, engine functions."""
