"""`stride train --nproc N --max-restarts K`: every attempt continues one run. A restart (torchrun starts every rank
again) resumes the run from its newest checkpoint in the run folder; three ways it did not, each seen with 2 gloo
ranks of a 30-step run, rank 1 SIGKILLed after step 12 (checkpoint every 5; AMD EPYC family 26 model 2):

- without --out each attempt's rank 0 made a run folder of its own: the restart began again from step 0 in a second
  folder, the first left unfinished;
- with --overwrite every attempt replaced the run, the first attempt's checkpoints included: redone from step 0;
- with checkpoint.enabled = false the restart was refused (the folder holds the failed attempt's metrics.jsonl):
  exit status 2, "nothing was trained or written past the refusal" after 12 trained steps.

The launcher now makes the folder for the ranks, --overwrite applies to the first attempt (its rank 0 replaces the
run, and no restart does: test_launcher_overwrite.py), and --max-restarts without checkpoints is refused before
anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

import stride.launch.torchrun as torchrun_mod
from stride.cli.main import main


def _no_launch(cmd: list[str], env: dict[str, str], **kw: object) -> int:
    raise AssertionError(f"launched: {cmd}")


def test_max_restarts_without_checkpoints_is_refused_before_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torchrun_mod, "run_torchrun", _no_launch)
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--nproc", "2", "--max-restarts", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--max-restarts 1: a restart continues the run from its newest checkpoint, and checkpoint.enabled is " \
           "false" in err and "--set checkpoint.enabled=true" in err, err
    assert not out.exists()


def test_without_out_the_launcher_hands_every_attempt_one_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    launched: list[list[str]] = []
    # as the ranks find them (holding the launcher's .stride-lock; removed again after, as the ranks wrote nothing)
    folders: list[Path] = []
    monkeypatch.setattr(torchrun_mod, "run_torchrun",
                        lambda cmd, env, **kw: launched.append(cmd) or folders.extend(runs.iterdir()) or 0)
    cfg = tmp_path / "c.toml"
    runs = tmp_path / "runs"
    cfg.write_text(f'[train]\nname = "r"\n[checkpoint]\nenabled = true\n[metrics]\nout_dir = "{runs}"\n')
    assert main(["train", str(cfg), "--nproc", "2", "--max-restarts", "2"]) == 0
    assert len(launched) == 1
    cmd = launched[0]
    assert len(folders) == 1 and folders[0].name.endswith("-r")
    assert cmd[cmd.index("--out") + 1] == str(folders[0]) and "--max-restarts=2" in cmd


@pytest.mark.parametrize(("count", "replaces"), [(None, True), ("0", True), ("1", False), ("3", False)])
def test_overwrite_replaces_the_run_in_the_first_attempt_only(count: str | None, replaces: bool, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import stride.train.trainer

    seen: list[bool] = []

    class Stop(Exception):
        pass

    def fake_trainer(*, config: object, out: object, overwrite: bool) -> None:
        seen.append(overwrite)
        raise Stop

    monkeypatch.setattr(stride.train.trainer, "Trainer", fake_trainer)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(var, raising=False)
    if count is not None:
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", count)
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    with pytest.raises(Stop):
        main(["train", str(cfg), "--out", str(tmp_path / "run"), "--overwrite"])
    assert seen == [replaces]


def test_max_restarts_with_resume_never_is_refused_before_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torchrun_mod, "run_torchrun", _no_launch)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[checkpoint]\nenabled = true\nresume = "never"\n')
    assert main(["train", str(cfg), "--nproc", "2", "--max-restarts", "2", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert 'checkpoint.resume is "never", so every restart would be refused' in err, err
    assert "--set checkpoint.resume=auto," in err
