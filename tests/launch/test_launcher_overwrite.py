"""`stride train --nproc N --max-restarts K --overwrite`: the run in --out is replaced by the first attempt's rank 0,
once its checks of the config have passed, and by no later attempt.

The launcher replaced it itself before starting torchrun, before any rank had looked at the config: a finished run
plus a config the ranks refused (`model.name=tcn`, `model.n_layers=11`, `data.seq_len=32`, `--nproc 1 --max-restarts 1
--overwrite`) left only `.stride-lock` in the folder, and the refusal still said "nothing was trained or written"
(outside review; without --max-restarts the old run survived). Without --out the launcher's stamped folder stayed in
runs/ empty after such a refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nproc_run import tiny_config

import stride.launch.torchrun as torchrun_mod
from stride.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def _finished_run(out: Path) -> list[str]:
    """A stand-in for a finished run's folder: its files, listed."""
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    (out / "summary.json").write_text('{"steps": 1}')
    return sorted(p.name for p in out.iterdir())


def test_the_launcher_replaces_nothing_and_hands_overwrite_to_the_ranks(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks refuse the config (exit status 2): the run in --out is as it was (the launcher had cleared it)."""
    launched: list[list[str]] = []
    monkeypatch.setattr(torchrun_mod, "run_torchrun", lambda cmd, env, **kw: launched.append(cmd) or 2)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[checkpoint]\nenabled = true\n")
    out = tmp_path / "run"
    files = _finished_run(out)
    assert main(["train", str(cfg), "--nproc", "1", "--max-restarts", "1", "--out", str(out), "--overwrite"]) == 2
    assert len(launched) == 1 and "--overwrite" in launched[0] and "--max-restarts=1" in launched[0]
    assert sorted(p.name for p in out.iterdir()) == files
    assert (out / "summary.json").read_text() == '{"steps": 1}'


def test_a_folder_no_attempt_wrote_in_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --out the launcher makes the run folder every attempt shares; the ranks refused, so it goes again."""
    launched: list[list[str]] = []
    monkeypatch.setattr(torchrun_mod, "run_torchrun", lambda cmd, env, **kw: launched.append(cmd) or 2)
    runs = tmp_path / "runs"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[train]\nname = "r"\n[checkpoint]\nenabled = true\n[metrics]\nout_dir = "{runs}"\n')
    assert main(["train", str(cfg), "--nproc", "1", "--max-restarts", "1"]) == 2
    out = Path(launched[0][launched[0].index("--out") + 1])
    assert out.parent == runs and out.name.endswith("-r")
    assert list(runs.iterdir()) == []


def test_a_folder_an_attempt_wrote_in_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(cmd: list[str], env: dict[str, str], **kw: object) -> int:
        (Path(cmd[cmd.index("--out") + 1]) / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
        return 1

    monkeypatch.setattr(torchrun_mod, "run_torchrun", run)
    runs = tmp_path / "runs"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[train]\nname = "r"\n[checkpoint]\nenabled = true\n[metrics]\nout_dir = "{runs}"\n')
    assert main(["train", str(cfg), "--nproc", "1", "--max-restarts", "1"]) == 1
    [folder] = runs.iterdir()
    assert (folder / "metrics.jsonl").exists()


def test_the_launchers_folder_is_made_as_run_dir_makes_it(tmp_path: Path) -> None:
    """One naming loop (RunDir.create's): a second folder in the same second gets `-1`; one that cannot be made is a
    RunDirError naming it, not an OSError traceback."""
    from stride.metrics.run_dir import RunDirError

    a = Path(torchrun_mod.new_run_folder(tmp_path, "r"))
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirError, match="file"):
        torchrun_mod.new_run_folder(tmp_path / "file", "r")
    b = Path(torchrun_mod.new_run_folder(tmp_path, "r"))
    assert a.is_dir() and b.is_dir() and a != b and not any(a.iterdir())


@pytest.mark.parametrize(("env", "applies"), [
    ({}, True),  # no launcher: as before
    ({"TORCHELASTIC_RESTART_COUNT": "0"}, True),  # the first attempt
    ({"TORCHELASTIC_RESTART_COUNT": "1"}, False),  # torchrun by hand: a restart never replaces
    ({"TORCHELASTIC_RESTART_COUNT": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "DIR": ""}, True),  # not yet
    ({"TORCHELASTIC_RESTART_COUNT": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "DIR": "",
      "REPLACED": ""}, False),  # an earlier attempt replaced it
    ({"TORCHELASTIC_RESTART_COUNT": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "DIR": ""}, False),  # --nnodes 2
])
def test_overwrite_applies_until_an_attempt_replaced_the_run(env: dict[str, str], applies: bool,
                                                             tmp_path: Path) -> None:
    env = dict(env)
    if env.pop("DIR", None) is not None:
        env[torchrun_mod.STATUS_DIR_ENV] = str(tmp_path)
    if env.pop("REPLACED", None) is not None:
        (tmp_path / torchrun_mod.REPLACED_NAME).write_text("1")
    assert torchrun_mod.overwrite_applies(env) is applies


def test_rank_0_replaces_the_run_and_notes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the first attempt under `stride train --nproc`: rank 0 replaces the run after the trainer was built (its
    config checks), notes it for the launcher, and the trainer then replaces nothing more."""
    import stride.train.trainer

    seen: list[tuple[bool, list[str]]] = []
    out = tmp_path / "run"
    _finished_run(out)

    class Stop(Exception):
        pass

    class FakeTrainer:
        def __init__(self, *, config: object, out: Path, overwrite: bool) -> None:
            self.out = Path(out)
            self.overwrite = overwrite

        def fit(self) -> None:
            seen.append((self.overwrite, sorted(p.name for p in self.out.iterdir() if p.name != ".stride-lock")))
            raise Stop

    monkeypatch.setattr(stride.train.trainer, "Trainer", FakeTrainer)
    status = tmp_path / "status"
    status.mkdir()
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                 "TORCHELASTIC_RESTART_COUNT": "0", torchrun_mod.STATUS_DIR_ENV: str(status)}.items():
        monkeypatch.setenv(k, v)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[checkpoint]\nenabled = true\n")
    with pytest.raises(Stop):
        main(["train", str(cfg), "--out", str(out), "--overwrite"])
    assert seen == [(False, [])] and (status / torchrun_mod.REPLACED_NAME).exists()
    (out / "summary.json").write_text('{"steps": 1}')
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # the restart: the run this attempt continues stays
    with pytest.raises(Stop):
        main(["train", str(cfg), "--out", str(out), "--overwrite"])
    assert seen[1] == (False, ["summary.json"])


# a config only the ranks refuse: the reviewer's tcn one (model.n_layers=11, data.seq_len=32) is refused before launch
# since f4968ae; a module:factory model is imported by each rank
RANKS_REFUSE = ["--set", 'model.name="stride_no_such_module:factory"']


def _stride(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run([sys.executable, "-m", "stride", "train", *args, "--no-progress"], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=env)


@pytest.mark.dist
def test_a_config_the_ranks_refuse_leaves_the_run_it_would_replace(tmp_path: Path) -> None:
    """The reviewer's case, end to end: a finished run, then the same --out with a config every rank refuses."""
    cfg = tiny_config(tmp_path / "c.toml", 2, "t", 1)
    out = tmp_path / "run"
    first = _stride(str(cfg), "--out", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    res = _stride(str(cfg), *RANKS_REFUSE, "--out", str(out), "--nproc", "1", "--max-restarts", "1", "--overwrite")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "stride_no_such_module" in res.stderr and "rank 0 refused" in res.stderr
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


SITE = textwrap.dedent("""
    import os
    if "LOCAL_RANK" in os.environ and os.environ.get("KILL_MARKER"):
        import signal
        from pathlib import Path
        from stride.checkpoint.callback import CheckpointCallback

        marker = Path(os.environ["KILL_MARKER"])
        real = CheckpointCallback.on_step_end

        def on_step_end(self, trainer):
            real(self, trainer)
            # the first attempt's rank 0 dies after step 5 (checkpoint at 4); torchrun starts it again
            if trainer.step == 5 and not marker.exists():
                marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
        CheckpointCallback.on_step_end = on_step_end
""")


@pytest.mark.dist
@pytest.mark.slow
def test_a_restart_resumes_the_run_its_first_attempt_replaced(tmp_path: Path) -> None:
    """--overwrite over a finished run of another seed, rank 0 killed after step 5: the first attempt replaced the
    run, the restart resumed it from step 4 in the same folder, and the result is the uninterrupted run's."""
    old = _stride(str(tiny_config(tmp_path / "old.toml", 4, "t", 2)), "--set", "train.seed=1",
                  "--out", str(tmp_path / "run"))
    assert old.returncode == 0, old.stderr[-3000:]
    cfg = tiny_config(tmp_path / "c.toml", 8, "t", 2)
    ref = _stride(str(cfg), "--out", str(tmp_path / "ref"))
    assert ref.returncode == 0, ref.stderr[-3000:]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    pythonpath = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
    res = _stride(str(cfg), "--out", str(tmp_path / "run"), "--nproc", "1", "--max-restarts", "1", "--overwrite",
                  env={"KILL_MARKER": str(tmp_path / "killed"), "PYTHONPATH": pythonpath})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "killed").exists()  # the first attempt really died
    assert res.stderr.count("resuming from step_00000004") == 1, res.stderr[-3000:]
    run, want = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("run", "ref"))
    assert run["params_sha256"] == want["params_sha256"] and run["steps"] == 8
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines if '"loss"' in x] == list(range(1, 9))
