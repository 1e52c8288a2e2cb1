"""Issue 19, cases 3 and 4: retention deletes only this run's own checkpoints; one run per folder.

Retention used to count the newest `keep_last` step folders whatever they were, and start-up removed every
`.tmp-*` / `.trash-*` entry. Two runs on one `--out` both exited 0 with one run's checkpoints gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from ckpt_helpers import Crash, CrashAt, dead_pid, fit, reference_sha, summary_sha, write_config
from fault_helpers import REPO, one_line_error, stride_cli, stride_main, tree_digest

from stride.checkpoint import verify
from stride.files.owner import tagged_name, this_host


@pytest.fixture(scope="module")
def ref() -> str:
    return reference_sha()


def _steps(ck: Path) -> list[str]:
    return sorted(p.name for p in ck.iterdir() if p.name.startswith("step_"))


def _truncate_a_shard(folder: Path) -> None:
    shard = next(folder.glob("__0_*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-100])


def test_a_stray_step_folder_is_neither_counted_nor_touched(tmp_path: Path, ref: str) -> None:
    out = tmp_path / "run"
    stray = out / "checkpoints" / "step_00000099"
    stray.mkdir(parents=True)
    (stray / "notes.txt").write_text("not a checkpoint")
    before = tree_digest(stray)
    s = fit(out)
    assert _steps(out / "checkpoints") == ["step_00000021", "step_00000024", "step_00000099"]
    assert all(verify(out / "checkpoints" / n).ok for n in ("step_00000021", "step_00000024"))
    assert tree_digest(stray) == before and s["params_sha256"] == ref


def test_three_truncated_newest_checkpoints_do_not_make_retention_delete_new_saves(tmp_path: Path, ref: str) -> None:
    out, keep = tmp_path / "run", "checkpoint.keep_every=9"
    fit(out, keep)  # a finished run: step_00000021 and step_00000024, and 9 and 18 (keep_every)
    for n in ("step_00000018", "step_00000021", "step_00000024"):
        _truncate_a_shard(out / "checkpoints" / n)
    (out / "summary.json").unlink()  # else the rerun refuses: nothing valid could continue the finished run
    with pytest.raises(Crash):  # resumes from 9, the newest valid; saves 12 and 15, dies at step 16
        fit(out, keep, callbacks=[CrashAt(16)])
    ck = out / "checkpoints"
    assert verify(ck / "step_00000012").ok and verify(ck / "step_00000015").ok  # its saves were kept
    s = fit(out, keep)  # resumes from 15; the saves at 18, 21 and 24 replace the damaged copies
    assert s["checkpoint"]["resumed_from"] == "step_00000015" and s["params_sha256"] == ref
    assert _steps(ck) == ["step_00000009", "step_00000018", "step_00000021", "step_00000024"]
    assert all(verify(ck / n).ok for n in _steps(ck))


def test_a_run_whose_checkpoints_are_all_damaged_is_not_started_over(tmp_path: Path) -> None:
    """Audit 6 (F4): with every committed checkpoint failing verification the rerun trained from step 0 over the
    earlier run (its metrics.jsonl replaced, exit 0), while a checkpoint that fails to load after verification
    stopped the run. Now both stop: the user moves the checkpoints away, or chooses another --out or --overwrite."""
    from stride.checkpoint import RunExistsError

    out = tmp_path / "run"
    fit(out)
    for n in ("step_00000021", "step_00000024"):
        _truncate_a_shard(out / "checkpoints" / n)
    (out / "summary.json").unlink()
    before = tree_digest(out)
    with pytest.raises(RunExistsError, match=r"holds an earlier run's checkpoints and none is valid \(no valid "
                                             r"checkpoint; skipped step_00000024: __0_\d\.distcp has \d+ bytes, "
                                             r"the manifest says \d+.*move the checkpoints away"):
        fit(out)
    assert tree_digest(out) == before  # nothing written


def test_resume_never_on_a_finished_run_refuses_and_deletes_nothing(tmp_path: Path) -> None:
    cfg, out = write_config(tmp_path / "run.toml", "checkpoint.resume=never"), tmp_path / "run"
    fit(out)
    before = tree_digest(out / "checkpoints")
    res = stride_main("train", str(cfg), "--out", str(out), "--no-progress")
    one_line_error(res, "checkpoint.resume = never", "finished run", "--overwrite")
    assert tree_digest(out / "checkpoints") == before


def test_start_up_clean_up_removes_only_stride_leftovers_of_dead_processes(tmp_path: Path) -> None:
    ck = tmp_path / "run" / "checkpoints"
    ck.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        keep = [".tmp-other-project", ".trash-notes.txt", ".tmp-step_00000003",
                tagged_name("tmp", "step_00000003", pid=sleeper.pid)]  # a live stride process' save
        for name in keep[:1] + keep[2:]:
            (ck / name).mkdir()
            (ck / name / "x").write_text("x")
        (ck / keep[1]).write_text("someone's file")
        gone = [tagged_name("tmp", "step_00000006", pid=dead_pid()), tagged_name("trash", "step_00000003",
                                                                                 pid=dead_pid())]
        for name in gone:
            (ck / name).mkdir()
        before = {n: tree_digest(ck / n) if (ck / n).is_dir() else (ck / n).read_text() for n in keep}
        fit(tmp_path / "run", "train.steps=3")
        after = {n: tree_digest(ck / n) if (ck / n).is_dir() else (ck / n).read_text() for n in keep}
        assert after == before
        assert not any((ck / n).exists() for n in gone)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_save_onto_a_folder_stride_did_not_write_fails_with_a_message_and_leaves_it(tmp_path: Path) -> None:
    cfg, out = write_config(tmp_path / "run.toml"), tmp_path / "run"
    stray = out / "checkpoints" / "step_00000006"
    stray.mkdir(parents=True)
    (stray / "mine.bin").write_bytes(b"\x00" * 10)
    before = tree_digest(stray)
    res = stride_main("train", str(cfg), "--out", str(out), "--no-progress")
    one_line_error(res, "step_00000006", "does not replace")
    assert tree_digest(stray) == before
    assert verify(out / "checkpoints" / "step_00000003").ok  # the previous checkpoint is intact


# -- one run per folder -----------------------------------------------------------------------------------

def _popen_train(cfg: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-m", "stride", "train", str(cfg), "--out", str(out), "--no-progress",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.stat().st_size:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared; the run ended with {proc.poll()}: {proc.stderr.read()[-2000:]}")


@contextlib.contextmanager
def _paused(pids: list[int]) -> Iterator[None]:
    """SIGSTOP the processes that train while the block runs, SIGCONT after: a run under test cannot finish
    while a second `stride train` is still starting (seconds on a loaded machine), so the second one really
    meets a run in progress. A stopped process keeps its lock; both collective peers stop together."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@pytest.mark.slow
def test_a_second_run_on_one_folder_is_refused_and_kill9_leaves_no_stale_lock(tmp_path: Path) -> None:
    cfg, out = write_config(tmp_path / "run.toml", "train.steps=150", "checkpoint.every=50"), tmp_path / "run"
    first = _popen_train(cfg, out)
    try:
        _wait_for(out / "metrics.jsonl", first)
        with _paused([first.pid]):
            second = stride_cli("train", str(cfg), "--out", str(out), "--no-progress")
        line = one_line_error(second, str(out), f"pid {first.pid} on {this_host()}")
        assert "in use by another stride run" in line
        assert first.poll() is None  # the first run goes on
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate()
    third = stride_cli("train", str(cfg), "--out", str(out), "--no-progress", "--set", "train.steps=150")
    assert third.code == 0, third.err[-3000:]  # the kernel released the dead holder's lock


@pytest.mark.slow
@pytest.mark.dist
def test_an_nproc_job_holds_its_folder_as_one_and_refuses_a_second_run(tmp_path: Path) -> None:
    # the job is paused (SIGSTOP) within milliseconds of its first metrics line, and trains on only after the second
    # run was refused: 100 steps (1.5-4 s) leave room for that moment on a loaded machine
    cfg = write_config(tmp_path / "run.toml", "parallel.dp_replicate=2", "train.steps=100", "checkpoint.every=0",
                       "parallel.collective_timeout_s=60")
    out = tmp_path / "run"
    job = _popen_train(cfg, out, "--nproc", "2")
    try:
        _wait_for(out / "metrics.jsonl", job, timeout=180)  # rank 0 writes: it accepted the parent's lock
        # the agent and both ranks wait while the second run starts; the parent, which holds the lock, runs on
        with _paused([c.pid for c in psutil.Process(job.pid).children(recursive=True)]):
            second = stride_cli("train", str(cfg), "--out", str(out), "--no-progress", "--set",
                                "parallel.dp_replicate=1")
        one_line_error(second, f"pid {job.pid} on {this_host()}")  # the launching parent holds it for its ranks
        _, err = job.communicate(timeout=300)
        assert job.returncode == 0, err[-3000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert summary_sha(out)
