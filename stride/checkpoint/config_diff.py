"""Which settings differ between the run that wrote a checkpoint and the run loading it."""

from __future__ import annotations

from typing import Any

# Settings that may change across a resume without changing what is trained.
IGNORED_SECTIONS = ("metrics", "checkpoint")
IGNORED_KEYS = ("train.name", "train.threads")


def config_diff(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Lines `section.key: saved -> current` for every training-relevant setting that differs."""
    lines: list[str] = []
    for sec in sorted(set(saved) | set(current)):
        if sec in IGNORED_SECTIONS:
            continue
        a, b = saved.get(sec, {}), current.get(sec, {})
        for key in sorted(set(a) | set(b)):
            dotted = f"{sec}.{key}"
            if dotted in IGNORED_KEYS:
                continue
            va, vb = a.get(key, "<absent>"), b.get(key, "<absent>")
            if va != vb:
                lines.append(f"{dotted}: {va!r} (checkpoint) -> {vb!r} (now)")
    return lines
