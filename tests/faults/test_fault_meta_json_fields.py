"""A checkpoint's meta.json edited with the manifest resealed (an attacker's careful edit, or a copy between folders).

`extended_from` ([-5, 3], [2, 2], [10**18]) passed the resume's check as any list of integers: the run resumed,
wrote it into summary.json, and `stride repro` then refused the finished run blaming summary.json. A `step` that is
not the folder's (10**18 in step_00000006) was taken without a word. Both now make the checkpoint invalid, with the
reason, so the resume falls back to an older one. Session 37's hostile-input audit; both tests fail on the old code.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ckpt_helpers import fit
from fault_helpers import reseal

from stride.checkpoint.safe_read import check_checkpoint


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ck") / "run"
    fit(out, "train.steps=6")  # step_00000003 and step_00000006
    return out


def _edited(run: Path, tmp_path: Path, **fields: object) -> Path:
    dst = tmp_path / "step_00000006"
    shutil.copytree(run / "checkpoints" / "step_00000006", dst)
    meta = json.loads((dst / "meta.json").read_text())
    (dst / "meta.json").write_text(json.dumps({**meta, **fields}))
    reseal(dst)
    return dst


def test_the_untouched_checkpoint_is_valid(run: Path, tmp_path: Path) -> None:
    assert check_checkpoint(_edited(run, tmp_path), 6).ok


@pytest.mark.parametrize("history", [[-5, 3], [2, 2], [0], [10**18], [6]])
def test_an_extended_from_that_is_no_history_of_segments_is_refused(run: Path, tmp_path: Path,
                                                                    history: list[int]) -> None:
    verdict = check_checkpoint(_edited(run, tmp_path, extended_from=history), 6)
    assert not verdict.ok and verdict.reason == f"meta.json: extended_from {history!r} is not what stride writes there"


def test_an_earlier_segment_below_this_ones_steps_is_a_history(run: Path, tmp_path: Path) -> None:
    assert check_checkpoint(_edited(run, tmp_path, extended_from=[2, 4]), 6).ok


@pytest.mark.parametrize("step", [0, 3, 10**18])
def test_a_meta_json_step_other_than_the_folders_is_refused(run: Path, tmp_path: Path, step: int) -> None:
    verdict = check_checkpoint(_edited(run, tmp_path, step=step), 6)
    assert not verdict.ok
    assert verdict.reason.startswith(f"meta.json says step {step}, its manifest and folder step 6")
