"""`stride launch ray`: stride's Trainer in Ray Train's TorchTrainer on a real local Ray cluster (2 CPU workers).

Reference: the same config under `stride train --nproc 2` (torchrun, DDP on gloo), deterministic mode.
The Ray run must reproduce its parameters bit for bit, also after a worker is killed (a second launch
on the same --out resumes; --max-failures restarts the workers, which resume from stride's checkpoint).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from stride.cli.main import main
from stride.config import ConfigError, load_config
from stride.config.schema import ParallelConfig
from stride.launch.ray_train import LAUNCH_DEFAULTS, RayLaunch, RayRunFailed, launch_ray, resolve_use_gpu
from stride.parallel.layout import resolve_layout
from stride.parallel.mesh import init_mesh
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
TINY_TOML = """[data]
n_assets = 4
n_steps = 1024
seq_len = 16
[train]
batch_size = 32
steps = 12
val_every = 0
threads = 1
deterministic = true
[optim]
warmup_steps = 2
[metrics]
progress = false
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("cfg") / "tiny.toml"
    p.write_text(TINY_TOML)
    return p


# -- without Ray, and the pieces that need no cluster ----------------------------------------------
def test_without_ray_the_command_says_how_to_install_it(config: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError, installed or not
    rc = main(["launch", "ray", str(config), "--workers", "2", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Ray Train is not installed" in err and "pip install -e '.[ray]' (in the stride clone)" in err
    assert not (tmp_path / "run").exists()


def test_use_gpu_choice() -> None:
    assert resolve_use_gpu("auto", 0, 2, "auto") is False
    assert resolve_use_gpu("auto", 4, 2, "auto") is True
    assert resolve_use_gpu("auto", 4, 2, "cpu") is False
    assert resolve_use_gpu("true", 0, 2, "auto") is True  # Ray then waits for / refuses the GPUs itself
    with pytest.raises(ConfigError, match="has 1 GPUs for 2 workers"):
        resolve_use_gpu("auto", 1, 2, "cuda")
    with pytest.raises(ConfigError, match="--use-gpu false but `train.device` = 'cuda'"):
        resolve_use_gpu("false", 8, 2, "cuda")
    with pytest.raises(ConfigError, match="--workers 0"):
        RayLaunch(workers=0)


def test_bad_layout_fails_before_ray_starts(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray.train.torch", reason="Ray Train is not installed (pip install -e '.[ray]')")
    import ray

    was_up = ray.is_initialized()
    rc = main(["launch", "ray", str(config), "--workers", "3", "--set", "parallel.dp_shard=2"])
    assert rc == 2 and "config error" in capsys.readouterr().err
    assert ray.is_initialized() == was_up


def test_mesh_uses_a_process_group_the_launcher_initialised(tmp_path: Path) -> None:
    """Ray Train initialises the default group before stride runs: the mesh is built on it, not beside it."""
    if dist.is_initialized():
        pytest.skip("another test in this process left a default process group initialised")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        mesh = init_mesh(resolve_layout(ParallelConfig(), 1), torch.device("cpu"), "gloo")
        assert dist.group.WORLD is group and mesh.rank == 0 and mesh.mesh.size() == 1
        with pytest.raises(ConfigError, match=r"`parallel.backend` = 'mpi' but the process group .* 'gloo'"):
            init_mesh(resolve_layout(ParallelConfig(), 1), torch.device("cpu"), "mpi")
    finally:
        dist.destroy_process_group()


# -- a real local Ray cluster ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory, ray_auth_token: str) -> Iterator[None]:
    """Ray on this machine, small: 2 CPUs, no dashboard, no usage stats, 100 MB object store.

    The auth token is given in the environment so Ray writes no ~/.ray/auth_token; the session files
    go under the test's temp dir (or a short /tmp dir: Ray's socket paths must stay under 108 bytes).
    """
    pytest.importorskip("ray.train.torch", reason="Ray Train is not installed (pip install -e '.[ray]')")
    import ray
    import ray.cloudpickle

    token_file = Path.home() / ".ray" / "auth_token"
    had_token = token_file.exists()
    temp = tmp_path_factory.mktemp("ray")
    short = None
    if len(str(temp)) > 40:
        short = temp = Path(tempfile.mkdtemp(prefix="stride-ray-"))
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("RAY_AUTH_TOKEN", ray_auth_token)
        mp.delenv("RAY_ADDRESS", raising=False)
        mp.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")  # one actor fewer per launch: no spot nodes here
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, _temp_dir=str(temp),
                 log_to_driver=True)
        try:
            yield
        finally:
            ray.shutdown()
            if short is not None:
                subprocess.run(["rm", "-rf", str(short)], check=False)
    assert had_token or not token_file.exists(), "Ray wrote ~/.ray/auth_token"


@pytest.fixture(scope="module")
def reference_launch(config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen, Path]]:
    """`stride train CONFIG --nproc 2`: torchrun, DDP over 2 gloo ranks, started before the Ray cluster (the tests
    ask for this fixture first) so that the two start-ups overlap; `reference` waits for it."""
    out = tmp_path_factory.mktemp("ref") / "run"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with (out.parent / "launch.log").open("w") as log:  # a file, not a pipe: nothing reads it while Ray starts
        proc = subprocess.Popen([sys.executable, "-m", "stride", "train", str(config), "--nproc", "2", "--out",
                                 str(out), "--no-progress"], stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def reference(reference_launch: tuple[subprocess.Popen, Path]) -> dict:
    proc, out = reference_launch
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log = (out.parent / "launch.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.dist
def test_ray_run_matches_torchrun_bitwise(reference_launch: tuple, ray_cluster: None, reference: dict, config: Path,
                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    rc = main(["launch", "ray", str(config), "--workers", "2", "--use-gpu", "false", "--out", str(out), "--json"])
    captured = capsys.readouterr().out
    assert rc == 0
    rep = json.loads(captured.strip().splitlines()[-1])
    s = rep["summary"]
    assert rep["summary_source"] == "ray" and rep["run_dir"] == str(out)  # Result.return_value of rank 0
    assert s["world_size"] == reference["world_size"] == 2 and s["parallel"] == reference["parallel"]
    assert s["steps"] == 12 and s["params_sha256"] == reference["params_sha256"]
    assert s["final_train_loss"] == reference["final_train_loss"]
    assert json.loads((out / "summary.json").read_text())["params_sha256"] == s["params_sha256"]  # rank 0 wrote it
    assert s["checkpoint"]["saved_steps"] == [12] and (out / "checkpoints" / "step_00000012").is_dir()
    assert "run directory:" in captured and "params" in captured  # the summary table was printed


@dataclass
class Probe(Callback):
    """Rank 0 notes the step each attempt starts from; `kill_rank` SIGKILLs itself once after `kill_step`."""

    log: str
    kill_step: int = 0
    kill_rank: int = 1
    marker: str = ""

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.par.is_rank0 and not getattr(self, "_noted", False):
            self._noted = True
            with open(self.log, "a") as f:
                f.write(f"{trainer.step - 1}\n")
        if (self.kill_step and trainer.step == self.kill_step and trainer.par.rank == self.kill_rank
                and not os.path.exists(self.marker)):
            Path(self.marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.dist
def test_killed_worker_then_relaunch_and_max_failures_resume_exactly(reference_launch: tuple, ray_cluster: None,
                                                                     reference: dict, config: Path,
                                                                     tmp_path: Path) -> None:
    cfg = load_config(config, [*LAUNCH_DEFAULTS, "checkpoint.every=3"])
    out, starts = tmp_path / "run", tmp_path / "starts.txt"
    # 1. rank 1 dies after step 7 and no restart is allowed: the launch fails, checkpoints 3 and 6 stay.
    probe = Probe(str(starts), kill_step=7, marker=str(tmp_path / "killed-1"))
    with pytest.raises(RayRunFailed, match=f"--out {out}"):
        launch_ray(cfg, RayLaunch(workers=2, use_gpu="false", out=out, max_failures=0, callbacks=[probe]))
    assert (tmp_path / "killed-1").exists() and (out / "checkpoints" / "step_00000006").is_dir()
    # 2. the same launch again on the same --out resumes from step 6; rank 1 dies again after step 10, and
    #    --max-failures 1 lets Ray restart both workers, which resume from step 9.
    probe = Probe(str(starts), kill_step=10, marker=str(tmp_path / "killed-2"))
    res = launch_ray(cfg, RayLaunch(workers=2, use_gpu="false", out=out, max_failures=1, callbacks=[probe]))
    assert (tmp_path / "killed-2").exists()
    assert starts.read_text().split() == ["0", "6", "9"]
    s = res.summary
    assert s["checkpoint"]["resumed_from"] == "step_00000009" and s["steps"] == 12
    assert s["params_sha256"] == reference["params_sha256"]  # as if never interrupted
