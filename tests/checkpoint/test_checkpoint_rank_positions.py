"""Two ranks whose data positions in one checkpoint are not one run's (audit 16, M1 and M5), and the fallback
line printed once (L2).

A rank's position with another `n_windows` passed the all-reduced check, then made that rank's loader raise in
`apply`: a traceback on rank 1, rank 0 ended by gloo, and the same on every restart. A rank at another batch,
with another seed, or replaying another count of batches resumed with exit 0, training on other data than
rank 0. Now the ranks exchange their positions before anything is applied and all skip the checkpoint together,
with one line (from rank 0) naming the ranks and values.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ckpt_helpers import write_config
from test_checkpoint_distributed_faults import HERE, _finish, _launch
from test_checkpoint_rng_state import _rewrite

ARGS = ("parallel.dp_replicate=2", "train.steps=11", "checkpoint.every=3", "checkpoint.keep_last=5",
        "checkpoint.save_at_end=false")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 2-rank DDP run with checkpoints at 3, 6 and 9 that looks killed after step 11 (no summary.json)."""
    tmp = tmp_path_factory.mktemp("positions")
    cfg = write_config(tmp / "run.toml", *ARGS)
    out = tmp / "base"
    _finish(_launch(HERE / "ckpt_signal_driver.py", ["train", str(cfg), "--out", str(out), "--no-progress"]))
    (out / "summary.json").unlink()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [f"step_{s:08d}" for s in (3, 6, 9)]
    return cfg, out


def _rank1(change: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    """An edit of rank 1's data position, given rank 0's and rank 1's."""
    def edit(state: dict[str, Any]) -> None:
        mine, other = json.loads(state["rank1"]["data"]), json.loads(state["rank0"]["data"])
        state["rank1"]["data"] = json.dumps(change(mine, other))

    return edit


def _set(**kv: Any) -> Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]:
    return lambda mine, other: {**mine, "state": {**mine["state"], **kv}}


def _behind(mine: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    return {**mine, "state": {**mine["state"], "position": other["state"]["position"] - 1}}


def _resume(tmp_path: Path, base: tuple[Path, Path], edits: dict[int, Callable[[dict[str, Any]], None]]) -> str:
    cfg, src = base
    out = tmp_path / "run"
    shutil.copytree(src, out)
    for step, edit in edits.items():
        _rewrite(out / "checkpoints" / f"step_{step:08d}", step, edit)
    errs = _finish(_launch(HERE / "ckpt_signal_driver.py", ["train", str(cfg), "--out", str(out), "--no-progress"]))
    s = json.loads((out / "summary.json").read_text())
    assert s["checkpoint"]["resumed_from"] == "step_00000003", errs[0][-3000:]
    assert "Traceback" not in errs[0] + errs[1]
    assert errs[1].count("could not load") == 0  # what every rank would say alike: rank 0 says it, once (L2)
    return errs[0]


@pytest.mark.dist
def test_a_rank_with_other_data_or_another_batch_is_skipped_on_every_rank(tmp_path: Path, base) -> None:
    err = _resume(tmp_path, base, {9: _rank1(_set(n_windows=5)), 6: _rank1(_behind)})
    lines = [ln for ln in err.splitlines() if "could not load" in ln]
    assert len(lines) == 2, err[-3000:]
    assert lines[0].startswith("stride checkpoint: could not load step_00000009 (rank 1's data position has "
                               "n_windows 5, this run's data "), lines[0]
    assert lines[0].endswith("); falling back to step_00000006")
    assert "could not load step_00000006 (rank 1's data position (epoch 0, batch " in lines[1], lines[1]
    assert ", seed 0) differs from rank 0's (epoch 0, batch " in lines[1]
    assert lines[1].endswith("); falling back to step_00000003")


@pytest.mark.dist
def test_a_rank_with_another_seed_or_a_replay_of_other_steps_is_skipped(tmp_path: Path, base) -> None:
    replay = _rank1(lambda mine, other: {"kind": "replay", "batches": 3})
    err = _resume(tmp_path, base, {9: _rank1(_set(seed=10**23)), 6: replay})
    assert (f"could not load step_00000009 (rank 1's data position (epoch 0, batch 9, seed {10**23}) differs from "
            "rank 0's (epoch 0, batch 9, seed 0)); falling back to step_00000006") in err, err[-3000:]
    assert ("could not load step_00000006 (rank 1's data position replays 3 batches, not the 6 steps taken); "
            "falling back to step_00000003") in err
