"""What every hostile-input test asserts: a clean refusal, nothing else touched, no code run.

- `one_line_error`: exit status 1 or 2, no traceback, and the last line of stderr is stride's one-line
  message naming the input.
- `tree_digest`: a hash of every path, kind, size and content under a folder, to show that a refused
  command changed nothing around the run's own files.
- `CANARY`: hostile payloads try to create a file; the tests assert it never appears.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# hypothesis settings for every generator here: the same examples on every run (a failure replays), no
# example database in the tree, no per-example deadline (a loaded 2-core box).
GEN = {"deadline": None, "derandomize": True, "database": None}


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def stride_cli(*args: str, timeout: float = 180, cwd: Path = REPO, env: dict[str, str] | None = None) -> Outcome:
    """`python -m stride ARGS` in a fresh process."""
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    r = subprocess.run([sys.executable, "-m", "stride", *args], capture_output=True, text=True, timeout=timeout,
                       cwd=cwd, env=full_env)
    return Outcome(r.returncode, r.stdout, r.stderr)


def stride_main(*args: str) -> Outcome:
    """`stride ARGS` in this process (fast); an exception escaping main() is what a user sees as a traceback."""
    from stride.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return Outcome(code, out.getvalue(), err.getvalue())


def one_line_error(res: Outcome, *names: str, codes: tuple[int, ...] = (1, 2)) -> str:
    """The refusal is stride's one line (naming each of `names`), with exit status 1 or 2 and no traceback."""
    assert res.code in codes, f"exit {res.code}, not in {codes}\nstdout: {res.out[-1500:]}\nstderr: {res.err[-3000:]}"
    assert "Traceback" not in res.err and "Traceback" not in res.out, res.err[-3000:]
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert lines, f"no message on stderr (exit {res.code}); stdout: {res.out[-1000:]}"
    last = lines[-1]
    assert last.startswith("stride "), f"the last line is not stride's message: {last!r}"
    for name in names:
        assert name in last, f"{name!r} is not named in the message: {last!r}"
    return last


def tree_digest(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """{relative path: kind + size + sha256 (files), link target (symlinks)} for everything under `root`."""
    out: dict[str, str] = {}
    skipped = [s.resolve() for s in skip]
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if (here / d).resolve() not in skipped or (here / d).is_symlink()]
        for name in dirnames + filenames:
            p = here / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = f"file:{p.stat().st_size}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
    return out


def canary_command(canary: Path) -> list[str]:
    return ["/bin/sh", "-c", f"echo pwned > {canary}"]


def reseal(folder: Path) -> None:
    """Recompute every size and checksum in a checkpoint's manifest, as an attacker who edits files would."""
    import json

    from stride.checkpoint.manifest import FORMATS, checksum_file

    path = folder / "manifest.json"
    man = json.loads(path.read_text())
    algo = FORMATS[man["format"]]
    for rel, info in man["files"].items():
        p = folder / rel
        if p.is_file():
            info["bytes"], info[algo] = p.stat().st_size, checksum_file(p, algo)
    path.write_text(json.dumps(man, indent=1))
