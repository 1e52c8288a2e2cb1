"""`stride launch slurm`: the script's content, and a real single-node Slurm that runs, requeues and resumes it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import ConfigError
from stride.launch.slurm import SlurmJob, render_sbatch

sys.path.insert(0, str(Path(__file__).parent))
from slurm_cluster import LocalSlurm  # noqa: E402

TINY_TOML = """[data]
n_assets = 4
n_steps = 1024
seq_len = 16
[train]
batch_size = 32
steps = 6
val_every = 0
threads = 1
[metrics]
progress = false
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(TINY_TOML)
    return p


def _sbatch_options(script: str) -> list[str]:
    return [line.split(None, 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_script_options_and_torchrun_line(config: Path, tmp_path: Path) -> None:
    job = SlurmJob(config=config, nodes=4, gpus_per_node=8, partition="gpu", time="04:00:00", job_name="big",
                   out_dir=tmp_path / "runs", overrides=["optim.lr=3e-4", "train.name=a b"],
                   extra_sbatch=["--account=quant"])
    script = render_sbatch(job)
    assert script.startswith("#!/bin/bash\n")
    assert _sbatch_options(script) == [
        "--job-name=big", "--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8", "--partition=gpu",
        "--time=04:00:00", f"--output={(tmp_path / 'runs').resolve()}/slurm-%x-%j.out", "--open-mode=append",
        "--signal=B:USR1@120", "--requeue", "--account=quant"]
    assert 'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    flat = script.replace("\\\n  ", "")
    assert '--nnodes="$SLURM_NNODES" --nproc-per-node=8' in flat
    assert '--rdzv-backend=c10d --rdzv-endpoint="$HEAD_NODE:$RDZV_PORT" --rdzv-id="$SLURM_JOB_ID"' in flat
    assert f"train {config.resolve()} --out \"$RUN_DIR\"" in flat
    assert ("--set checkpoint.enabled=true --set checkpoint.resume=auto --set optim.lr=3e-4 "
            "--set 'train.name=a b'") in flat
    assert "trap requeue USR1" in script and 'scontrol requeue "$SLURM_JOB_ID"' in script
    assert 'scancel --signal=USR1 "$SLURM_JOB_ID.0"' in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid bash


def test_cpu_job_has_no_gpu_request(config: Path) -> None:
    script = render_sbatch(SlurmJob(config=config, nodes=1, gpus_per_node=0, procs_per_node=2))
    assert not any(o.startswith("--gpus") for o in _sbatch_options(script))
    assert "--nproc-per-node=2" in script


@pytest.mark.parametrize("kwargs, needle", [({"nodes": 0}, "--nodes"), ({"time": "4 hours"}, "--time"),
                                            ({"gpus_per_node": -1}, "--gpus-per-node"),
                                            ({"job_name": "a b"}, "--job-name")])
def test_bad_options_are_named(config: Path, kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        render_sbatch(SlurmJob(config=config, **kwargs))
    with pytest.raises(ConfigError, match="config file not found"):
        render_sbatch(SlurmJob(config=config.parent / "missing.toml"))


def test_dry_run_prints_the_script(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "slurm", str(config), "--nodes", "2", "--gpus-per-node", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --nodes=2" in out and "#SBATCH --gpus-per-node=4" in out


def test_trap_ignores_usr1_in_the_task_wrapper() -> None:
    """The srun wrapper's `trap "" USR1; exec "$@"` leaves a child Python with SIGUSR1 ignored (not killed)."""
    code = "import os, signal, time; os.kill(os.getpid(), signal.SIGUSR1); time.sleep(0.1); print('alive')"
    out = subprocess.run(["bash", "-c", 'trap "" USR1; exec "$@"', "stride-task", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "alive"
    bare = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert bare.returncode == -10  # without the wrapper SIGUSR1's default action ends the process


@pytest.mark.slow
def test_real_slurm_runs_requeues_and_resumes(config: Path, tmp_path: Path) -> None:
    why = LocalSlurm.available()
    if why is not None:
        pytest.skip(f"no local Slurm: {why}")
    cluster = LocalSlurm(tmp_path / "slurm")
    cluster.start()
    try:
        out = subprocess.run([sys.executable, "-m", "stride.cli.main", "launch", "slurm", str(config),
                              "--out-dir", str(tmp_path / "runs"), "--job-name", "tiny",
                              "--set", "train.steps=400", "--set", "metrics.log_every=10"],
                             env=cluster.env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        job_id = out.stdout.split()[3]
        run = tmp_path / "runs" / f"tiny-{job_id}"
        metrics = run / "metrics.jsonl"
        end = time.monotonic() + 180
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
            assert time.monotonic() < end, f"job {job_id} made no progress: {cluster.job_state(job_id)}"
            time.sleep(0.5)
        # What Slurm does --signal-lead seconds before the limit: SIGUSR1 to the batch shell.
        cluster.run("scancel", "--signal=USR1", "--batch", job_id)
        released, state, idle_since = False, "", None
        end = time.monotonic() + 240
        while time.monotonic() < end:
            state = cluster.job_state(job_id)
            idle = state == "PENDING" and cluster.node_idle()
            idle_since = (idle_since or time.monotonic()) if idle else None
            # A requeued job waits ~2 minutes before it is eligible; release it once the node has been
            # idle for 3 s. Sooner, slurmd kills it: its credential revocation of the first attempt has
            # one-second resolution, so a launch in the same second reads as "Job credential revoked".
            if idle_since is not None and not released and time.monotonic() - idle_since >= 3.0:
                cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
                released = True
            if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
                break
            time.sleep(0.5)
        info = cluster.run("scontrol", "show", "job", job_id)
        log = (tmp_path / "runs" / f"slurm-tiny-{job_id}.out").read_text()
        assert state == "COMPLETED", f"{state}\n{info}\n{log}"
        assert released and "Restarts=1" in info and "ExitCode=0:0" in info
        assert "attempt 0" in log and "attempt 1" in log and "SIGUSR1: checkpointing and requeueing" in log
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == 400
        resumed = summary["checkpoint"]["resumed_from"]
        assert resumed is not None and resumed.startswith("step_")
        resumed_step = int(resumed.split("_")[1])
        assert 0 < resumed_step < 400
        steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if '"loss"' in line]
        # Attempt 0 logged up to the signal, attempt 1 continued after the checkpoint's step: every
        # 10th step exactly once. Starting over would log steps 10, 20, ... a second time.
        assert steps == list(range(10, 401, 10))
    finally:
        cluster.stop()
