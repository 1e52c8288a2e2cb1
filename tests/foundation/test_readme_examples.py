"""The README and docs send a new user only to what a clone has, and their examples run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_name_no_file_a_clone_lacks(doc: Path) -> None:
    """Before: README and docs pointed at ../shared/perfmodel, ../shared/traces and FACTS.md (the
    project's shared data folder, which a clone does not have)."""
    text = doc.read_text()
    assert "../shared" not in text and "FACTS.md" not in text
    for line in text.splitlines():  # config files named in commands exist in the clone
        if re.match(r"\s*(\$ )?(\.venv/bin/)?(stride|python|PYTHONPATH=\S+ \.venv/bin/stride) ", line):
            for cfg in re.findall(r"\b(configs/[\w.-]+\.toml)\b", line):
                assert (ROOT / cfg).is_file(), (doc.name, line)


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)


@pytest.mark.slow
def test_readme_python_example_runs(tmp_path: Path) -> None:
    code = re.search(r"### Your own model and data\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert code, "the README's Python example moved"
    script = tmp_path / "example.py"
    # the README's own lines; the run directories go to tmp_path instead of the clone's runs/
    script.write_text("import os\nos.chdir(" + repr(str(tmp_path)) + ")\n" + code.group(1).replace(
        '"configs/quickstart.toml"', repr(str(ROOT / "configs" / "quickstart.toml"))))
    p = _run([sys.executable, str(script)])
    assert p.returncode == 0, p.stderr[-3000:]


def test_readme_plugin_example_runs(tmp_path: Path) -> None:
    """The README's `PYTHONPATH=examples` command as written, plus 3 steps and a tmp --out: examples/mypkg
    trains (its model returns [B, n_horizons])."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(PYTHONPATH=examples .*?)```", text, re.S)
    assert block, "the README's plugin command moved"
    words = shlex.split(block.group(1).replace("\\\n", " "))
    assert words[:2] == ["PYTHONPATH=examples", ".venv/bin/stride"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "examples")}
    argv = [sys.executable, "-m", "stride", *words[2:], "--set", "train.steps=3", "--set", "train.val_every=0",
            "--set", "metrics.progress=false", "--out", str(tmp_path / "run")]
    p = _run(argv, env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "run" / "summary.json").is_file()


def test_an_unimportable_model_package_says_how_to_make_it_importable(capsys: pytest.CaptureFixture[str]) -> None:
    from stride.cli.main import main

    assert main(["train", str(ROOT / "configs/quickstart.toml"), "--set", "model.name=nopkg_xyz.models:build"]) == 2
    err = capsys.readouterr().err
    assert "cannot import module 'nopkg_xyz.models'" in err and "pip install -e" in err and "PYTHONPATH" in err
