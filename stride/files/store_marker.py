"""What makes a folder a stride data store: its manifest's format marker.

Here, below stride.data, so that stride.files.folder_kind (which commands refuse to write into a store) and
stride.data.store (which writes and opens stores) read one definition (pyproject.toml's import contracts keep
stride.files from importing stride.data).
"""

from __future__ import annotations

import json
from pathlib import Path

FORMAT = "stride-store"


def is_store(path: Path, *, through_symlink: bool = False) -> bool:
    """`path` is a directory holding a stride store manifest (complete or not: its format says it is a store).

    A symlink to a store counts only with `through_symlink`: a command that refuses to write into a store refuses
    through a link too, while `ingest --overwrite` must never delete through one."""
    path = Path(path)
    if not path.is_dir() or (path.is_symlink() and not through_symlink):
        return False
    try:
        m = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(m, dict) and m.get("format") == FORMAT
