"""`stride repro`: a deterministic tiny run re-runs bit for bit; tampered records are caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import ConfigError, load_config
from stride.launch.repro import RunFolderError, env_diff, reproduce
from stride.train.trainer import Trainer

TINY = ["data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "train.batch_size=32", "train.steps=6",
        "train.val_every=0", "metrics.progress=false", "train.threads=1", "optim.warmup_steps=2"]


def _record(tmp_path: Path, *extra: str) -> Path:
    run = tmp_path / "orig"
    Trainer(config=load_config(overrides=TINY + list(extra)), out=run).fit()
    return run


def test_deterministic_repro_is_bitwise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _record(tmp_path, "train.deterministic=true")
    rc = main(["repro", str(run), "--json"])
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and rep["matches"] and rep["params_match"] and rep["deterministic"]
    assert rep["loss_rel_diff"] == 0.0 and rep["config_hash_match"]
    assert rep["rerun"] == str(tmp_path / "orig-repro")
    assert not any(k.startswith("packages.") for k in rep["env_diff"])  # same venv both times
    orig = json.loads((run / "summary.json").read_text())
    new = json.loads((tmp_path / "orig-repro" / "summary.json").read_text())
    assert orig["params_sha256"] == new["params_sha256"]


def test_a_run_recorded_with_its_progress_bar_hashes_as_recorded(tmp_path: Path) -> None:
    """Before: repro turned the progress bar off and then hashed, so every run recorded with it on (the default)
    was reported as a config_hash mismatch."""
    run = _record(tmp_path, "metrics.progress=true")
    rep = reproduce(run, tmp_path / "r", tolerance=1.0)
    assert rep.config_hash_match


def test_tampered_record_is_a_mismatch(tmp_path: Path) -> None:
    run = _record(tmp_path)
    s = json.loads((run / "summary.json").read_text())
    s["params_sha256"] = "0" * 64
    s["final_train_loss"] *= 1 + 1e-3
    (run / "summary.json").write_text(json.dumps(s))
    rep = reproduce(run, tmp_path / "r1", tolerance=1e-5)
    assert not rep.deterministic and not rep.params_match and not rep.matches
    assert rep.loss_rel_diff == pytest.approx(1e-3 / (1 + 1e-3), rel=1e-6)  # |a - b| / max(|a|, |b|)
    assert "MISMATCH" in rep.verdict
    rep = reproduce(run, tmp_path / "r2", tolerance=2e-3)  # non-deterministic: within tolerance passes
    assert rep.matches and "within tolerance" in rep.verdict


@pytest.mark.parametrize("world", [-3, 0, "2", True, 1.5])
def test_a_recorded_world_size_that_is_not_a_process_count_is_refused(tmp_path: Path, world: object) -> None:
    """Audit 7: a summary.json edited to `world_size: -3` was re-run on one process, reported as "-3 (single)"."""
    run = _record(tmp_path)
    s = json.loads((run / "summary.json").read_text())
    s["world_size"] = world
    (run / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ConfigError, match=r"summary.json: `world_size` = .* is not a process count"):
        reproduce(run, tmp_path / "r", tolerance=1e-5)
    assert not (tmp_path / "r").exists()


def test_deterministic_mismatch_is_not_excused_by_tolerance(tmp_path: Path) -> None:
    run = _record(tmp_path, "train.deterministic=true")
    s = json.loads((run / "summary.json").read_text())
    s["params_sha256"] = "f" * 64
    (run / "summary.json").write_text(json.dumps(s))
    rep = reproduce(run, tmp_path / "r", tolerance=1.0)
    assert rep.loss_rel_diff == 0.0 and not rep.matches and "deterministic" in rep.verdict


def test_deterministic_rerun_on_other_hardware_is_judged_by_its_loss(tmp_path: Path) -> None:
    """A run recorded on another CPU family (its env.json names another CPU): the parameters differ in
    the last bit there, so the verdict compares the final loss instead of calling it a mismatch."""
    run = _record(tmp_path, "train.deterministic=true")
    env = json.loads((run / "env.json").read_text())
    env["cpu_model"] = "Intel(R) Xeon(R) Platinum 8480+"
    (run / "env.json").write_text(json.dumps(env))
    s = json.loads((run / "summary.json").read_text())
    s["params_sha256"] = "e" * 64  # what another CPU family's last-bit differences do to the hash
    s["final_train_loss"] *= 1 + 1e-7
    (run / "summary.json").write_text(json.dumps(s))
    rep = reproduce(run, tmp_path / "r", tolerance=1e-5)
    assert "cpu_model" in rep.env_diff and rep.matches and "other hardware" in rep.verdict
    assert not reproduce(run, tmp_path / "r2", tolerance=1e-9).matches  # the loss still has to agree


def test_env_diff_names_code_and_packages() -> None:
    a = {"git_commit": "abc", "git_dirty": False, "packages": {"torch": "2.13.0", "numpy": "2.1"}, "cpu_count": 2}
    b = {"git_commit": "def", "git_dirty": True, "packages": {"torch": "2.14.0", "numpy": "2.1", "x": "1"},
         "cpu_count": 2}
    assert env_diff(a, b) == {"git_commit": ("abc", "def"), "git_dirty": (False, True),
                              "packages.torch": ("2.13.0", "2.14.0"), "packages.x": (None, "1")}


def test_unfinished_run_dir_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "summary.json").write_text('{"params_sha256": ')
    with pytest.raises(RunFolderError, match="not valid JSON"):  # the run files' check, first in reproduce
        reproduce(tmp_path / "half")
    with pytest.raises(ConfigError, match="summary.json not found"):
        reproduce(tmp_path / "nothing")


def test_a_run_on_the_callers_data_says_so_and_repro_refuses_it(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Data passed to Trainer(train_data=...) is not what config.toml's [data] describes (a window of 32 steps
    where the config says 16): summary.json says where model and data came from, and `stride repro`, which
    would have re-run the config's synthetic data and reported a mismatch, refuses in one line."""
    import torch

    g = torch.Generator().manual_seed(0)
    data = (torch.randn(256, 32, 7, generator=g), torch.randn(256, 2, generator=g))
    run = tmp_path / "own"
    cfg = load_config(overrides=[*TINY, "data.horizons=[1, 5]", "model.name=lstm"])  # any window length
    s = Trainer(train_data=data, config=cfg, out=run).fit().summary
    assert s["inputs_from"] == {"model": "config", "data": "caller", "loss": "config"}
    assert s["timesteps_per_s"] == pytest.approx(s["samples_per_s"] * 32)  # the data's 32 steps, not the config's 16
    assert main(["repro", str(run)]) == 2
    err = capsys.readouterr().err
    assert "trained on data passed to Trainer(...)" in err and "config.toml does not describe" in err
    assert not (tmp_path / "own-repro").exists()
    assert _record(tmp_path, "train.steps=2").joinpath("summary.json").read_text().count('"caller"') == 0
    own_loss = tmp_path / "own_loss"
    Trainer(config=load_config(overrides=[*TINY, "train.steps=2"]), out=own_loss,
            loss_fn=lambda pred, y: torch.nn.functional.l1_loss(pred, y)).fit()
    assert main(["repro", str(own_loss)]) == 2 and "trained on a loss passed to Trainer" in capsys.readouterr().err


def _edit_summary(run: Path, **changes: object) -> None:
    s = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**s, **changes}))


def test_a_layout_change_mid_run_is_reported_and_named_in_the_verdict(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a run resumed under another world size (killed at 1 process, continued at --nproc 2) re-ran as one
    launch, and the report said only "environment: same code version, packages and hardware" beside the
    mismatch. Now it states the recorded layout history, that one launch cannot replay it, and names it."""
    run = _record(tmp_path)
    s = json.loads((run / "summary.json").read_text())
    _edit_summary(run, start_step=3, final_train_loss=s["final_train_loss"] * 1.1, params_sha256="0" * 64,
                  checkpoint={"resumed_from": "step_00000003", "extended_from": [],
                              "resume_changes": ["world size: 2 (checkpoint) -> 1 (now)"]})
    assert main(["repro", str(run), "--out", str(tmp_path / "r1")]) == 1
    text = capsys.readouterr().out
    note = ("the recorded run changed layout or execution when it resumed at step 3 (world size: 2 (checkpoint) -> "
            "1 (now)); one launch cannot replay that")
    assert f"layout history: {note}\n" in text
    assert "environment: same code version, packages and hardware\n" not in text
    assert f"MISMATCH: final loss rel. diff 9.09e-02 > 1e-05 (likely cause: {note})" in text
    assert main(["repro", str(run), "--out", str(tmp_path / "r2"), "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["layout_changes"] == ["world size: 2 (checkpoint) -> 1 (now)"] and rep["layout_note"] == note
    assert rep["world_size_original"] == rep["world_size_rerun"] == 1
    assert rep["parallel_original"] == rep["parallel_rerun"] == s["parallel"]
    # a resume that changed only how batches were loaded or validated changes nothing a re-run cannot replay
    _edit_summary(run, checkpoint={"resumed_from": "step_00000003", "extended_from": [],
                                   "resume_changes": ["data.prefetch: 'auto' (checkpoint) -> 4 (now)",
                                                      "train.val_every: 0 (checkpoint) -> 2 (now)"]})
    rep = reproduce(run, tmp_path / "r3")
    assert rep.layout_note is None and "likely cause" not in rep.verdict


def test_a_rerun_on_another_world_size_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--nproc 1` for a run recorded on 2 processes: the re-run is one process, and a mismatch says so."""
    run = _record(tmp_path)
    s = json.loads((run / "summary.json").read_text())
    _edit_summary(run, world_size=2, parallel="ddp", params_sha256="0" * 64,
                  final_train_loss=s["final_train_loss"] * 1.1)
    rep = reproduce(run, tmp_path / "r", nproc=1)
    assert (rep.world_size_original, rep.world_size_rerun, rep.layout_note) == (2, 1, None)
    assert rep.verdict.endswith("(likely cause: the re-run ran on 1 process(es), the recorded run on 2)")
    assert main(["repro", str(run), "--nproc", "0"]) == 2
    assert "--nproc 0 must be >= 1" in capsys.readouterr().err
    # a count the recorded layout does not fit (a batch of 32 over 3 ranks): one config error, exit 2, nothing
    # launched (before: the launched ranks refused it and repro exited 1, as for a mismatch)
    assert main(["repro", str(run), "--nproc", "3", "--out", str(tmp_path / "r3")]) == 2
    err = capsys.readouterr().err
    assert "config error" in err and "batch" in err and not (tmp_path / "r3").exists()


@pytest.mark.dist
@pytest.mark.slow
def test_a_multi_rank_run_is_re_run_on_its_world_size(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a 2-rank DDP run was re-run as one process, silently. Now `stride train --nproc 2` re-runs it (the
    ranks' output on stderr: stdout holds the report alone)."""
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    cfg, run = tmp_path / "c.toml", tmp_path / "orig"
    cfg.write_text('[train]\nname = "repro"\n')
    sets = [a for o in TINY for a in ("--set", o)]
    assert main(["train", str(cfg), *sets, "--set", "parallel.dp_replicate=2", "--out", str(run), "--nproc", "2"]) == 0
    capfd.readouterr()
    assert main(["repro", str(run), "--json"]) == 0
    out = capfd.readouterr().out
    rep = json.loads(out)  # one JSON object, nothing else
    assert rep["world_size_original"] == rep["world_size_rerun"] == 2 and rep["layout_note"] is None
    assert rep["parallel_original"] == rep["parallel_rerun"] == "ddp" and rep["matches"]
    assert json.loads((tmp_path / "orig-repro" / "summary.json").read_text())["world_size"] == 2


def test_the_one_process_advice_names_the_degrees_to_set() -> None:
    """`--nproc 1` alone is refused for a config that sets tp = 2: the advice names what to set with it."""
    from stride.launch.repro import one_process_advice

    assert one_process_advice(load_config(overrides=["parallel.tp=2", "parallel.dp_shard=2"])) == \
        "`stride repro --nproc 1 --set parallel.dp_shard=1 --set parallel.tp=1` re-runs it in one process"
    assert one_process_advice(load_config()) == "`stride repro --nproc 1` re-runs it in one process"
