"""Preemption across ranks: a signal that reaches the ranks at different moments still stops them at one step.

2 gloo processes (DDP). Without the ranks' agreement the signalled rank would enter the final save's
barrier while the other is already in the next step's gradient all-reduce: a hang (ended here by the
collective watchdog, exit 124) or checkpoints of two different steps. Every subprocess has a hard timeout.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from ckpt_helpers import write_config
from test_checkpoint_distributed_faults import HERE, _finish, _launch

from stride.checkpoint import verify
from stride.checkpoint.guard import decode_vote, encode_vote

DRIVER = HERE / "ckpt_signal_driver.py"
STEPS = 40
OVERRIDES = ("parallel.dp_replicate=2", f"train.steps={STEPS}", "checkpoint.every=0",
             "parallel.collective_timeout_s=20")
STOPPED = re.compile(r"stride checkpoint: SIG(TERM|USR1) at step (\d+)( \(received by another rank\))?: checkpoint "
                     r"step_(\d{8}) committed")


@pytest.mark.parametrize(("votes", "expected"), [
    ([(True, False, 0), (True, False, 0)], (False, False, 0)),
    ([(True, False, 0), (True, False, signal.SIGTERM)], (False, False, signal.SIGTERM)),  # one rank signalled
    ([(True, False, signal.SIGUSR1), (True, False, signal.SIGTERM)], (False, False, signal.SIGTERM)),
    ([(False, False, 0), (True, False, signal.SIGUSR1)], (True, False, signal.SIGUSR1)),  # skip and stop: both
    ([(True, True, 0), (True, False, signal.SIGTERM)], (False, True, 0)),  # rollback first, stop voted next step
    ([(True, False, 0), (False, True, signal.SIGTERM)], (True, True, 0)),
])
def test_the_vote_combines_skip_rollback_and_stop_across_ranks(votes, expected) -> None:
    """The all-reduce takes the element-wise MAX of the ranks' 2-float votes."""
    combined = [max(col) for col in zip(*(encode_vote(*v) for v in votes), strict=True)]
    assert len(combined) == 2 and decode_vote(combined) == expected


def _run(cfg: Path, out: Path, **env: str) -> list[subprocess.Popen]:
    return _launch(DRIVER, ["train", str(cfg), "--out", str(out), "--no-progress"], **env)


def _sha(out: Path) -> str:
    return json.loads((out / "summary.json").read_text())["params_sha256"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The config and the final params_sha256 of an uninterrupted 2-rank run."""
    tmp = tmp_path_factory.mktemp("preempt-ref")
    cfg = write_config(tmp / "run.toml", *OVERRIDES)
    _finish(_run(cfg, tmp / "ref"))
    return cfg, _sha(tmp / "ref")


def _stopped_at(errs: list[str]) -> tuple[int, bool]:
    """(step, whether rank 0 itself received the signal), from rank 0's exit message: the only rank that says it."""
    m = STOPPED.search(errs[0])
    assert m is not None, errs[0][-3000:]
    assert int(m.group(2)) == int(m.group(4))
    for err in errs[1:]:
        assert STOPPED.search(err) is None, err[-3000:]  # one line for the run, not one per rank
    return int(m.group(2)), m.group(3) is None


def _check_one_new_checkpoint(out: Path, step: int, before: list[str]) -> list[str]:
    """The stop added one committed save, of `step`, and nothing half-written; returns the folder's names."""
    ck = out / "checkpoints"
    names = sorted(p.name for p in ck.iterdir())
    assert names == [*before, f"step_{step:08d}"], (before, names)
    verdict = verify(ck / f"step_{step:08d}")
    assert verdict.ok, verdict.reason
    assert {f for f in verdict.manifest["files"] if f.endswith(".distcp")} >= {"__0_0.distcp", "__1_0.distcp"}
    return names


def _resumed_at(errs: list[str], step: int) -> None:
    assert f"continuing at step {step}" in errs[0], errs[0][-2000:]  # rank 0 says it for every rank
    assert "continuing at step" not in errs[1]


@pytest.mark.slow
@pytest.mark.dist
def test_a_signal_to_one_rank_or_at_different_steps_stops_both_ranks_at_one_step(
        tmp_path: Path, reference: tuple[Path, str]) -> None:
    """Two stops of one run, each resumed by the same command, then its end. 1. SIGTERM to rank 1 only, wherever it
    is in its step (rank 0 gets nothing): both ranks stop after one step. 2. The resumed run: rank 0 sends itself
    SIGUSR1 at the end of a step (after that step's vote), rank 1 SIGTERM inside the next step's forward. Each alone
    would save a different step; agreed, both stop after the second. 3. The same command resumes and finishes,
    bit-identical to the uninterrupted run. (One chain of 3 launches where two separate runs took 4: each stop and
    each resume is still checked.)"""
    cfg, ref = reference
    out = tmp_path / "run"
    procs = _run(cfg, out)
    metrics, deadline = out / "metrics.jsonl", time.monotonic() + 120
    while time.monotonic() < deadline and procs[1].poll() is None:  # rank 0 logs every step
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
            break
        time.sleep(0.002)
    procs[1].send_signal(signal.SIGTERM)  # wherever rank 1 is in its step; rank 0 gets nothing
    errs = _finish(procs)
    s0, got0 = _stopped_at(errs)
    assert 5 <= s0 < STEPS, s0  # both ranks saved this one step
    assert not got0  # rank 0 stopped because rank 1 was signalled
    names = _check_one_new_checkpoint(out, s0, [])

    # rank 0: SIGUSR1 at the end of step s0 + 2; rank 1: SIGTERM inside step s0 + 3's forward
    errs = _finish(_run(cfg, out, SELF_SIGNAL=f"0:{s0 + 2}:end:USR1,1:{s0 + 3}:mid:TERM"))
    _resumed_at(errs, s0)
    assert _stopped_at(errs) == (s0 + 3, True)
    assert f"SIGUSR1 at step {s0 + 3}" in errs[0]  # rank 0 names its own signal
    _check_one_new_checkpoint(out, s0 + 3, names)

    errs = _finish(_run(cfg, out))
    _resumed_at(errs, s0 + 3)
    assert _sha(out) == ref  # bit-identical to the uninterrupted run
