"""In-process checkpoint tests: exact resume, async, retention, refusal of broken or foreign checkpoints."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from ckpt_helpers import Crash, CrashAt, ckpt_config, dead_pid, fit, reference_sha

from stride.checkpoint import CheckpointError, ConfigMismatchError, RunExistsError, verify
from stride.checkpoint.manifest import write_manifest
from stride.checkpoint.store import CheckpointStore
from stride.files.owner import tagged_name
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer


@pytest.fixture(scope="module")
def ref() -> str:
    return reference_sha()


def crash_then_resume(out: Path, at: int, *overrides: str) -> dict:
    with pytest.raises(Crash):
        fit(out, *overrides, callbacks=[CrashAt(at)])
    return fit(out, *overrides)


def test_resume_after_crash_is_bit_identical(tmp_path: Path, ref: str) -> None:
    s = crash_then_resume(tmp_path / "run", 10)  # saves at 3, 6, 9; crash after step 10
    assert s["checkpoint"]["resumed_from"] == "step_00000009"
    assert s["steps"] == 24 and s["params_sha256"] == ref
    assert s["checkpoint_count"] == 5  # 12, 15, 18, 21 and the final 24
    assert s["checkpoint_stall_s"] > 0 and s["step_time_breakdown_s"]["checkpoint"] > 0


def test_resume_mid_epoch_and_across_epoch_boundary(tmp_path: Path) -> None:
    # 4 assets x ~900 windows / 32 = ~110 batches an epoch: use a small data set so 24 steps span epochs.
    ov = ("data.n_steps=200",)  # (200-15-5)*0.9 = 162 ends x 4 assets / 32 = 20 batches per epoch
    ref = reference_sha(*ov)
    s = crash_then_resume(tmp_path / "run", 22, *ov, "checkpoint.every=20")  # save at the epoch's last batch
    assert s["checkpoint"]["resumed_from"] == "step_00000020" and s["params_sha256"] == ref


def test_async_save_resume_is_bit_identical(tmp_path: Path, ref: str) -> None:
    s = crash_then_resume(tmp_path / "run", 11, "checkpoint.async_save=true")
    assert s["checkpoint"]["async"] and s["params_sha256"] == ref
    assert s["checkpoint"]["resumed_from"] in ("step_00000009", "step_00000006")


def test_async_snapshot_is_taken_at_the_save_step(tmp_path: Path) -> None:
    """Training continues while the background write runs: the files must hold the step's params."""
    hashes: dict[int, dict[str, torch.Tensor]] = {}
    lrs: dict[int, float] = {}

    class Record(Callback):
        def on_step_end(self, trainer: Trainer) -> None:
            hashes[trainer.step] = {k: v.clone() for k, v in trainer.model.state_dict().items()}
            lrs[trainer.step] = trainer.optimizer.param_groups[0]["lr"]

    out = tmp_path / "run"
    fit(out, "checkpoint.async_save=true", "checkpoint.keep_last=10", callbacks=[Record()])
    cfg = ckpt_config("train.steps=3", "checkpoint.every=0", "checkpoint.save_at_end=false")
    for step in (3, 12, 21):
        tr = Trainer(config=cfg, write_run_dir=False)
        tr.setup()
        store = CheckpointStore(out / "checkpoints")
        from stride.checkpoint import train_state

        loaded = store.load(store.folder(step), lambda keys, tr=tr: train_state.load_template(tr, keys))
        for k, v in loaded["model"].items():
            assert torch.equal(v, hashes[step][k]), (step, k)
        assert loaded["optim"]["param_groups"][0]["lr"] == lrs[step] != lrs[step + 1]
    torch.use_deterministic_algorithms(False)


def test_retention_keeps_last_k_and_every_nth(tmp_path: Path) -> None:
    s = fit(tmp_path / "run", "checkpoint.every=2", "checkpoint.keep_last=2", "checkpoint.keep_every=8")
    names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert names == ["step_00000008", "step_00000016", "step_00000022", "step_00000024"]
    assert s["checkpoint"]["saved_steps"] == list(range(2, 25, 2))


def _corrupt_shard(folder: Path) -> None:
    shard = folder / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the checksum can tell
    shard.write_bytes(bytes(data))


def _truncate_manifest(folder: Path) -> None:
    m = folder / "manifest.json"
    m.write_text(m.read_text()[:40])


def _remove_metadata(folder: Path) -> None:
    (folder / ".metadata").unlink()


@pytest.mark.parametrize(("damage", "reason"), [
    (_corrupt_shard, "__0_0.distcp does not match its xxh3_128 checksum (corrupted)"),
    (_truncate_manifest, "manifest.json is not valid JSON"),
    (_remove_metadata, ".metadata is missing"),
])
def test_damaged_newest_checkpoint_is_skipped_with_reason(tmp_path: Path, ref: str, damage, reason: str,
                                                          capsys) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(10)])
    damage(out / "checkpoints" / "step_00000009")
    s = fit(out)
    assert s["checkpoint"]["resumed_from"] == "step_00000006"
    (skipped,) = s["checkpoint"]["skipped_on_resume"]
    assert skipped.startswith("step_00000009: ") and reason in skipped
    assert "skipped step_00000009" in capsys.readouterr().err
    assert s["params_sha256"] == ref


def test_uncommitted_save_is_never_loaded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(7)])
    ck = out / "checkpoints"
    tmp = ck / tagged_name("tmp", "step_00000006", pid=dead_pid())
    (ck / "step_00000006").rename(tmp)  # as if killed before the rename
    assert verify(tmp).ok  # complete files, yet never committed by rename: not loaded
    s = fit(out)
    assert s["checkpoint"]["resumed_from"] == "step_00000003"
    assert not tmp.exists()


def test_config_mismatch_is_refused_with_a_diff_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(4)])
    with pytest.raises(ConfigMismatchError) as err:
        fit(out, "optim.lr=0.0005")
    assert "optim.lr: 0.001 (checkpoint) -> 0.0005 (now)" in str(err.value)
    s = fit(out, "optim.lr=0.0005", "checkpoint.force_resume=true")
    assert s["checkpoint"]["resumed_from"] == "step_00000003"
    # metrics and checkpoint settings may change freely: the run is recognised as this one, and finished
    again = Trainer(config=ckpt_config("optim.lr=0.0005", "metrics.log_every=5", "checkpoint.keep_last=3"),
                    out=out).fit()
    assert again.already_finished and again.summary == s


class _Evil:
    def __reduce__(self):
        return (Path("/tmp/stride-pwned").write_text, ("pwned",))


def test_crafted_metadata_pickle_is_refused_without_running_it(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(4)])
    folder = out / "checkpoints" / "step_00000003"
    (folder / ".metadata").write_bytes(pickle.dumps(_Evil()))
    write_manifest(folder, 3, {"config_hash": json.loads((folder / "manifest.json").read_text())["config_hash"]})
    marker = Path("/tmp/stride-pwned")
    marker.unlink(missing_ok=True)
    # the crafted checkpoint is skipped with the reason; with no valid one left the rerun stops (audit 6: starting
    # from step 0 replaced the earlier run) and names why
    metrics = (out / "metrics.jsonl").read_bytes()
    with pytest.raises(RunExistsError, match=r"none is valid \(no valid checkpoint; skipped step_00000003: \.metadata "
                                             r"refers to builtins:getattr.*refused.*move the checkpoints away"):
        fit(out)
    assert not marker.exists()
    assert (out / "metrics.jsonl").read_bytes() == metrics  # the earlier run's records as they were


def test_nan_loss_skips_the_update(tmp_path: Path) -> None:
    seen: dict[int, str] = {}
    calls = {"n": 0}

    def loss_fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        loss = torch.nn.functional.mse_loss(pred, y)
        return loss * float("nan") if calls["n"] == 5 else loss  # the 5th forward: step 5

    class Record(Callback):
        def on_step_end(self, trainer: Trainer) -> None:
            seen[trainer.step] = {k: v.clone() for k, v in trainer.model.state_dict().items()}

    cfg = ckpt_config("checkpoint.nan_rollback_after=0")
    try:
        s = Trainer(config=cfg, out=tmp_path / "run", loss_fn=loss_fn, callbacks=[Record()]).fit().summary
    finally:
        torch.use_deterministic_algorithms(False)
    assert s["skipped_steps"] == 1 and s["checkpoint"]["nonfinite_steps"] == 1
    assert all(torch.equal(seen[4][k], seen[5][k]) for k in seen[4])  # step 5 applied no update
    assert not all(torch.equal(seen[5][k], seen[6][k]) for k in seen[5])
    assert all(torch.isfinite(v).all() for v in seen[24].values())


def test_nan_loss_rolls_back_and_replays_exactly(tmp_path: Path, ref: str) -> None:
    calls = {"n": 0}

    def loss_fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        loss = torch.nn.functional.mse_loss(pred, y)
        return loss * float("inf") if calls["n"] in (8, 9) else loss  # steps 8 and 9, once

    cfg = ckpt_config("checkpoint.nan_rollback_after=2")
    try:
        s = Trainer(config=cfg, out=tmp_path / "run", loss_fn=loss_fn).fit().summary
    finally:
        torch.use_deterministic_algorithms(False)
    assert s["checkpoint"]["rollbacks"] == 1
    assert s["params_sha256"] == ref  # rolled back to step 6 and replayed 7.. with the same data and RNG


def test_loss_spike_detector_skips(tmp_path: Path) -> None:
    calls = {"n": 0}

    def loss_fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        loss = torch.nn.functional.mse_loss(pred, y)
        return loss * 100 if calls["n"] == 15 else loss

    cfg = ckpt_config("checkpoint.spike_threshold=10", "checkpoint.spike_action=skip")
    try:
        s = Trainer(config=cfg, out=tmp_path / "run", loss_fn=loss_fn).fit().summary
    finally:
        torch.use_deterministic_algorithms(False)
    assert s["checkpoint"]["loss_spikes"] == 1 and s["skipped_steps"] == 1


def test_unwritable_folder_fails_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(CheckpointError, match="is not writable"):
        fit(tmp_path / "run", f"checkpoint.dir={json.dumps(str(blocker / 'ckpt'))}")


def test_sigusr1_checkpoints_and_exits_zero_then_resumes(tmp_path: Path, ref: str) -> None:
    import os
    import signal

    class Preempt(Callback):
        def on_step_end(self, trainer: Trainer) -> None:
            if trainer.step == 5:
                os.kill(os.getpid(), signal.SIGUSR1)  # handled at once; the checkpoint callback runs next

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as ex:
        fit(out, callbacks=[Preempt()])
    assert ex.value.code == 0
    assert verify(out / "checkpoints" / "step_00000005").ok  # saved at the end of the step it arrived in
    # a late copy while the process would be exiting is absorbed (stride's handler stays for the window)
    os.kill(os.getpid(), signal.SIGUSR1)
    from stride.checkpoint import signals

    signals.PreemptionSignal().uninstall()  # what a later stop signal, after the window, would do first
    assert signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, signal.default_int_handler)
    s = fit(out)
    assert s["checkpoint"]["resumed_from"] == "step_00000005" and s["params_sha256"] == ref


def test_source_without_state_dict_is_replayed_exactly(tmp_path: Path) -> None:
    """Tensor-pair data (TensorBatches) has no state_dict: resume replays the batches already consumed."""

    def run(out: Path | None, callbacks: list[Callback] | None = None) -> str:
        g = torch.Generator().manual_seed(3)
        x, y = torch.randn(256, 16, 3, generator=g), torch.randn(256, 2, generator=g)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 16), torch.nn.Dropout(0.2),
                                    torch.nn.Linear(16, 2))
        cfg = ckpt_config() if out is not None else ckpt_config("checkpoint.enabled=false")
        tr = Trainer(model=model, train_data=(x, y), config=cfg, loss_fn=torch.nn.functional.mse_loss,
                     out=out, write_run_dir=out is not None, callbacks=callbacks)
        try:
            return tr.fit().summary["params_sha256"]
        finally:
            torch.use_deterministic_algorithms(False)

    # The first fit in a process draws from the torch RNG after seeding (stride.metrics.peak.device_peak
    # measures the CPU peak with random matrices, once): run one first so the reference is not that one.
    run(None)
    ref = run(None)  # 8 batches an epoch: 24 steps are 3 epochs; dropout draws from the torch RNG
    out = tmp_path / "run"
    with pytest.raises(Crash):
        run(out, [CrashAt(11)])
    assert run(out) == ref


def test_copies_of_a_stop_signal_are_one_request_and_a_late_one_ends_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies within REPEAT_WINDOW_S (the scheduler's and torchrun's agent's) are counted, not acted on; a
    stop signal after the window goes to the handler that was there before (an operator ending a stuck run)."""
    import os
    import signal

    from stride.checkpoint import signals

    ended: list[int] = []
    before = signal.signal(signal.SIGUSR1, lambda signum, frame: ended.append(signum))  # stands in for SIG_DFL
    clock = [100.0]
    monkeypatch.setattr(signals.time, "monotonic", lambda: clock[0])
    sig = signals.PreemptionSignal()
    try:
        assert sig.install()
        os.kill(os.getpid(), signal.SIGTERM)  # handled at once (the main thread runs the handler next)
        clock[0] += 0.002
        os.kill(os.getpid(), signal.SIGUSR1)  # a copy 2 ms later, as another signal: still the same request
        clock[0] += signals.REPEAT_WINDOW_S - 0.01
        os.kill(os.getpid(), signal.SIGTERM)
        assert (sig.received, sig.repeats, ended) == (signal.SIGTERM, 2, [])
        clock[0] += 0.02  # past the window: the previous handler gets it, and is installed again
        os.kill(os.getpid(), signal.SIGUSR1)
        assert ended == [signal.SIGUSR1] and signal.getsignal(signal.SIGUSR1) is not sig._handle  # noqa: SLF001
    finally:
        sig.uninstall()
        signal.signal(signal.SIGUSR1, before)


@pytest.mark.slow
def test_a_compiled_optimizers_run_resumes_exactly(tmp_path: Path) -> None:
    """Audit 6 (F1): `train.compile=model+optimizer` keeps the learning rate in a tensor, so the scheduler's base_lrs
    are tensors; their checkpoint JSON holds numbers, which the shape check refused ("not a Tensor") on every
    checkpoint, and the run could not resume. Now the numbers load back as tensors of the live dtype: the resumed
    run ends on the uninterrupted run's parameters, bit for bit."""
    ov = ("train.compile=model+optimizer",)
    s = crash_then_resume(tmp_path / "run", 10, *ov)
    assert s["checkpoint"]["resumed_from"] == "step_00000009"
    assert s["params_sha256"] == reference_sha(*ov)


def test_a_shard_replaced_by_other_bytes_is_skipped_naming_why(tmp_path: Path, capsys) -> None:
    """Audit 6 (F6): a .distcp replaced by a pickle (its checksum rewritten in the manifest) was skipped as
    "could not load step_00000006 (EOFError: )". It still falls back, runs nothing, and now says what is wrong."""
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(7)])  # saves at 3 and 6
    folder = out / "checkpoints" / "step_00000006"
    shard = next(folder.glob("__0_*.distcp"))
    shard.write_bytes(pickle.dumps({"not": "a shard"}))
    old = json.loads((folder / "manifest.json").read_text())
    write_manifest(folder, 6, {k: old[k] for k in ("config_hash", "world_size", "lineage")})  # this run's own
    s = fit(out)
    err = capsys.readouterr().err
    assert s["checkpoint"]["resumed_from"] == "step_00000003"
    assert "could not load step_00000006 (" in err and "one is not what DCP wrote" in err, err
