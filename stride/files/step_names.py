"""The name of a checkpoint's step folder (`step_NNNNNNNN`), in one place.

Both the checkpoint store (which writes and resumes such folders) and the folder-kind check (which
refuses to let another command write into a train run's folder) read it; `stride.files` sits below
`stride.checkpoint`, so it lives here.
"""

from __future__ import annotations

import re
from pathlib import Path

STEP_RE = re.compile(r"^step_(\d{8})$")


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def holds_steps(root: Path) -> bool:
    """Whether `root` holds a step folder: what a run resumes from (a stray file so named is not one)."""
    try:
        return any(STEP_RE.match(p.name) and p.is_dir() for p in root.iterdir())
    except OSError:  # absent or unreadable: nothing to resume from there
        return False
