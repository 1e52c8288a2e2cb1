"""One torchrun launch per world size for every test module here that trains under torchrun through a worker.

Such a module names its part and its runs (`TORCHRUN_PART`, `TORCHRUN_RUNS` = {world size: [run names]}) and
reads its folder from the session fixture `torchrun_runs`. The runs of all the modules selected in this session
go into one launch per world size (combined_worker.py): starting 2 or 4 processes (torchrun, then torch and
stride imported in every rank) costs seconds of both cores, more than most of these runs, and four modules each
launched their own. Only the parts of the modules selected in this session run (`pytest
tests/parallel/test_user_model_plan.py` launches its own two runs alone).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

COMBINED = Path(__file__).with_name("combined_worker.py")
# the pipeline part ends with its crash-and-resume runs
ORDER = ("correctness", "tp_optim", "user_model", "rank_streams", "tp_mfu", "layout", "pipeline")


@dataclass
class TorchrunRuns:
    root: Path
    parts: dict[int, list[str]]  # world size -> the parts its launch ran, in order
    failures: dict[int, str] = field(default_factory=dict)  # world size -> the failed launch's stderr

    def folder(self, part: str) -> Path:
        """The part's folder once every launch that had runs of it completed them; else the launch's error."""
        folder = self.root / part
        for world, parts in self.parts.items():
            if part in parts and not (folder / f".done-{world}").exists():
                raise AssertionError(f"torchrun {world} ranks failed before the {part!r} runs were done:\n"
                                     f"{self.failures.get(world, '')[-4000:]}")
        return folder


def _launch(nproc: int, args: list[str], out: Path, timeout: float) -> str | None:
    """`torchrun --standalone --nproc-per-node=N combined_worker.py OUT PART=...`: None, or stderr on failure."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):  # torchrun sets its own; a stale one would confuse the workers
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(COMBINED),
           str(out), *args]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return f"no result after {timeout:.0f} s\n{exc.stderr or ''}"
    return proc.stderr if proc.returncode else None


@pytest.fixture(scope="session")
def torchrun_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TorchrunRuns:
    modules = {item.module for item in request.session.items
               if "torchrun_runs" in getattr(item, "fixturenames", ()) and getattr(item, "module", None) is not None}
    wanted = {m.TORCHRUN_PART: m.TORCHRUN_RUNS for m in modules}
    root = tmp_path_factory.mktemp("torchrun_runs")
    runs = TorchrunRuns(root, {})
    for world in sorted({w for by_world in wanted.values() for w in by_world}):
        parts = [p for p in ORDER if wanted.get(p, {}).get(world)]
        for part in parts:
            (root / part).mkdir(exist_ok=True)
        runs.parts[world] = parts
        failure = _launch(world, [f"{p}={','.join(wanted[p][world])}" for p in parts], root, timeout=900)
        if failure is not None:
            runs.failures[world] = failure
    return runs
