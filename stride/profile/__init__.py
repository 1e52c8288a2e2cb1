"""Bottleneck analyzer: where a step's time goes, from PyTorch profiler (Kineto/Chrome) traces.

Entry point: `stride.profile.analyze.analyze_traces(paths) -> dict` (what `stride analyze --json` prints).
"""
