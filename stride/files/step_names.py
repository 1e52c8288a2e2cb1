"""The name of a checkpoint's step folder (`step_NNNNNNNN`), in one place.

Both the checkpoint store (which writes and resumes such folders) and the folder-kind check (which
refuses to let another command write into a train run's folder) read it; `stride.files` sits below
`stride.checkpoint`, so it lives here.
"""

from __future__ import annotations

import re
from pathlib import Path

from stride.errors import StrideError, os_reason

STEP_RE = re.compile(r"^step_(\d{8})$")


def step_name(step: int) -> str:
    return f"step_{step:08d}"


class UnreadableFolder(StrideError):
    """A checkpoint folder exists but cannot be listed: whether it holds checkpoints is unknown."""


def step_numbers(root: Path) -> list[int]:
    """The steps of the step folders in `root`, newest first (a stray file so named is not one): what a run
    resumes from. An absent folder holds none; one that exists but cannot be listed is refused rather than taken
    for empty (a run would start over and then fail, or later resume from it unexpectedly)."""
    try:
        found = [int(m.group(1)) for p in root.iterdir() if (m := STEP_RE.match(p.name)) and p.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise UnreadableFolder(f"checkpoint folder {root} cannot be listed ({os_reason(e)}): whether it holds "
                               "checkpoints is unknown; fix its permissions or name another folder") from e
    return sorted(found, reverse=True)


def holds_steps(root: Path) -> bool:
    """Whether `root` holds a step folder (`step_numbers`)."""
    return bool(step_numbers(root))
