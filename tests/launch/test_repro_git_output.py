"""`stride.metrics.env.git_output` is the one public way to ask git (review: stride.launch.repro imported the private
`_git` helper of stride.metrics.env). The fingerprint and repro's edited-config message both go through it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stride.config import load_config
from stride.launch.repro import edited_config_message
from stride.metrics import env as env_mod

REPO = Path(env_mod.__file__).resolve().parents[2]


def _git_head() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=5)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def test_git_output_is_git_stdout_or_none(tmp_path: Path) -> None:
    head = _git_head()
    assert env_mod.git_output(["rev-parse", "HEAD"], REPO) == head
    assert env_mod.fingerprint()["git_commit"] == head
    assert env_mod.git_output(["rev-parse", "--verify", "--quiet", "no-such-ref-xyz"], REPO) is None  # git fails
    assert env_mod.git_output(["rev-parse", "HEAD"], tmp_path / "missing") is None  # no such folder: OSError


def test_repro_asks_git_through_the_public_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake(args: list[str], cwd: Path) -> str | None:
        calls.append(args)
        return "b" * 40 if args[0] == "rev-parse" else " stride/config/schema.py | 2 +-"

    monkeypatch.setattr(env_mod, "git_output", fake)
    msg = edited_config_message(tmp_path, load_config(), {"config_hash": "0" * 16}, {"git_commit": "a" * 40})
    assert calls == [["rev-parse", "HEAD"], ["diff", "--stat", "a" * 40, "b" * 40, "--", "stride/config"]]
    assert f'recorded at commit "{"a" * 40}", this is "{"b" * 40}"' in msg
