"""Measurement: step-time breakdown, FLOPs and MFU, memory, environment, the run directory."""
