"""`stride train --nproc N` runs torchrun underneath; a bad layout fails before anything is launched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from launch_guard import children_killed_after

import stride.launch.torchrun as torchrun_mod
from stride.cli.main import main
from stride.launch.torchrun import launcher_env, torchrun_command

TINY = ["--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "data.n_assets=4",
        "--set", "data.n_steps=600", "--set", "data.seq_len=16", "--set", "train.batch_size=8",
        "--set", "train.steps=3", "--set", "train.val_every=0", "--set", "metrics.flops=false",
        "--set", "metrics.log_every=1"]


def test_torchrun_command_single_and_multi_node():
    one = torchrun_command(["c.toml"], nproc=2, max_restarts=3)
    assert one[1:3] == ["-m", "torch.distributed.run"]
    assert {"--nproc-per-node=2", "--nnodes=1", "--max-restarts=3", "--standalone"} <= set(one)
    assert one[-4:] == ["-m", "stride", "train", "c.toml"]
    multi = torchrun_command(["c.toml"], nproc=4, nnodes=2, rdzv_endpoint="host:29400", node_rank=1)
    assert {"--rdzv-backend=c10d", "--rdzv-endpoint=host:29400", "--node-rank=1", "--nnodes=2"} <= set(multi)
    assert "--standalone" not in multi
    assert launcher_env(1)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_bad_layout_fails_before_launch(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[parallel]\ndp_shard = 3\n")
    assert main(["train", str(cfg), "--nproc", "2"]) == 2
    assert "multiply to 3, but the world size is 2" in capsys.readouterr().err
    assert main(["train", str(cfg), "--nproc", "1", "--nnodes", "3"]) == 2  # no --rdzv-endpoint
    assert "needs --rdzv-endpoint" in capsys.readouterr().err


def _no_launch(cmd, env, **kw):
    raise AssertionError(f"launched despite a bad layout: {cmd}")


@pytest.mark.parametrize(("overrides", "message"), [
    (["parallel.tp=2", "model.d_model=48", "model.n_heads=3"],
     "`model.n_heads` = 3 is not divisible by `parallel.tp` = 2"),
    (["parallel.pp=2", "model.n_layers=1"], "makes 2 pipeline stages, but the model has only 1 layers"),
    (["parallel.pp=2", "parallel.microbatches=3"],
     "does not split into `train.grad_accum` = 1 x `parallel.microbatches` = 3"),
    (["parallel.dp_shard=2", "train.batch_size=7"], "`train.batch_size` = 7 does not split into 2 data-parallel ranks"),
    # checked in the ranks alone: two started and each refused (outside audit of the layouts)
    (["parallel.backend='nccl'", "train.device='cpu'"], "`parallel.backend` = 'nccl' needs a CUDA device, but the run"),
])
def test_model_dependent_layout_errors_fail_once_before_launch(monkeypatch, capsys, tmp_path, overrides, message):
    """The checks that need the model (built on the meta device) run in the launching process: no rank starts."""
    monkeypatch.setattr(torchrun_mod, "run_torchrun", _no_launch)
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    sets = [a for o in overrides for a in ("--set", o)]
    assert main(["train", str(cfg), "--nproc", "2", *sets]) == 2
    err = capsys.readouterr().err
    assert err.count(message) == 1, err


def test_valid_tp_and_pp_layouts_pass_the_check_and_launch(monkeypatch, tmp_path):
    launched: list[list[str]] = []
    monkeypatch.setattr(torchrun_mod, "run_torchrun", lambda cmd, env, **kw: launched.append(cmd) or 0)
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    for extra in (["parallel.tp=2"], ["parallel.pp=2"], ["parallel.dp_shard=2"]):
        assert main(["train", str(cfg), "--nproc", "2", *[a for o in extra for a in ("--set", o)]]) == 0
    assert len(launched) == 3 and all("--nproc-per-node=2" in c for c in launched)


def test_bad_layout_from_the_command_line_is_one_error_and_no_process(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[parallel]\ntp = 2\n[model]\nd_model = 48\nn_heads = 3\n")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "LOCAL_RANK", "RANK")}
    proc = subprocess.run([sys.executable, "-m", "stride", "train", str(cfg), "--nproc", "2", "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("`model.n_heads` = 3 is not divisible by `parallel.tp` = 2") == 1, proc.stderr[-2000:]
    assert "torch.distributed.run" not in proc.stderr and "Traceback" not in proc.stderr  # torchrun never ran


@pytest.mark.dist
@pytest.mark.slow
def test_nproc_2_writes_one_run_dir_and_prints_shared_notices_once(tmp_path, capfd, monkeypatch):
    """A 1-process run resumed at --nproc 2 (torchrun, DDP): one run directory, one writer, and what every rank
    shares printed once. The resume block (and the staging choice, where 2 ranks take every core) is rank 0's to
    print; what a rank says of itself (rank 1 has no RNG state in the checkpoint) stays; "run directory:" is
    printed by rank 0 alone and metrics.jsonl holds each step once. (A fresh `--nproc 2` run was a test of its own:
    one launch fewer; the writer and the printing are the same for a resumed run.)"""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[train]\nname = "dist"\n[checkpoint]\nenabled = true\nevery = 2\nasync_save = true\n')
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "LOCAL_RANK", "RANK")}
    proc = subprocess.run([sys.executable, "-m", "stride", "train", str(cfg), "--out", str(out), "--no-progress",
                           *TINY], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the resume at --nproc 2 with this process as the launcher (tests/launch_guard.py: a launcher process fewer)
    for var in ("WORLD_SIZE", "LOCAL_RANK", "RANK"):
        monkeypatch.delenv(var, raising=False)
    with children_killed_after(240):
        rc = main(["train", str(cfg), "--out", str(out), "--no-progress", *TINY, "--nproc", "2", "--set",
                   "train.steps=5"])
    proc = capfd.readouterr()
    err = proc.err
    assert rc == 0, err[-3000:]
    assert err.count("resuming from step_00000003") == 1, err[-3000:]
    assert err.count("world size: 1 (checkpoint) -> 2 (now)") == 1
    assert err.count("checkpoint.staging = auto") <= 1  # printed only on a node whose 2 ranks take every core
    assert err.count("no RNG or data state for rank 1") == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["parallel"] == "ddp" and summary["steps"] == 5
    assert summary["per_rank_samples_per_s"] == pytest.approx(summary["samples_per_s"] / 2)
    assert proc.out.count("run directory:") == 1  # rank 0 only
    lines = (out / "metrics.jsonl").read_text().splitlines()
    # steps 1-3 of the first run, 4-5 of the resumed one: one writer, no duplicated records
    assert sorted(json.loads(line)["step"] for line in lines if '"loss"' in line) == [1, 2, 3, 4, 5]


def test_a_ranks_refusal_is_one_write(monkeypatch, tmp_path):
    """Every rank of `stride train --nproc` says its refusal; as print's two writes (the text, then its newline) a
    multi-line one (a checkpoint's config diff) glued onto the next rank's: `... -> 'bf16' (now)stride train: config
    error: ...` (outside audit of the layouts). One write per refusal, newline included."""
    import io

    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return super().write(text)

    monkeypatch.setattr(sys, "stderr", Recorder())
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    assert main(["train", str(cfg), "--out", str(tmp_path / "r"), "--set", "parallel.cp=2"]) == 2
    said = [w for w in writes if "config error" in w]
    assert len(said) == 1 and said[0].endswith("\n") and "parallel.cp" in said[0], writes


def test_a_job_launched_elsewhere_keeps_its_backend():
    """`stride launch` (a Slurm script written on a login node without a GPU) is not refused for `nccl`: only
    `stride train --nproc`, whose ranks run on this host, checks the backend against this host's device."""
    from stride.config import load_config
    from stride.launch.preflight import check_before_launch

    cfg = load_config(overrides=["parallel.backend='nccl'", "train.device='cpu'"])
    assert check_before_launch(cfg, 2).dp_replicate == 2
