"""STRIDE_TEST_SEEDS: the seed a failing test printed can be replayed, and a range swept, through the `seed` fixture
of tests/conftest.py (run here on a small test file of its own, in a fresh pytest process)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

PROBE = '''
import pytest

def test_records(seed):
    with open("seen.txt", "a") as f:
        f.write(f"{seed}\\n")

@pytest.mark.parametrize("seed", [5])
def test_own_values_kept(seed):
    assert seed == 5
'''


def _run(tmp_path: Path, seeds: str | None) -> tuple[subprocess.CompletedProcess, list[int]]:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "seen.txt").unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "STRIDE_TEST_SEEDS"}
    if seeds is not None:
        env["STRIDE_TEST_SEEDS"] = seeds
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-p", "no:randomly", str(tmp_path / "test_probe.py")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    seen = [int(x) for x in (tmp_path / "seen.txt").read_text().split()] if (tmp_path / "seen.txt").exists() else []
    return p, seen


def test_listed_seeds_and_ranges_each_run_once(tmp_path: Path) -> None:
    # a replay is the one-seed case of the same list ("1266434485"); a fresh seed a run is what the rest of the suite
    # does with the variable unset
    p, seen = _run(tmp_path, "3,7-9")
    assert p.returncode == 0, p.stdout + p.stderr
    assert seen == [3, 7, 8, 9] and "5 passed" in p.stdout  # four seeds and the test with its own values


def test_a_malformed_list_is_refused_naming_it(tmp_path: Path) -> None:
    p, seen = _run(tmp_path, "7-x")
    assert p.returncode != 0 and not seen
    assert "STRIDE_TEST_SEEDS='7-x'" in p.stdout + p.stderr
