"""Issue 19, case 1: a crafted checkpoint must not run code, and resume falls back past it.

The exploit: a DCP `.metadata` that unpickles `subprocess.Popen` through a dotted global (pickle protocol 4)
rooted in a module the old restricted unpickler trusted, with the manifest's checksums recomputed so the
integrity check passes. Before the fix `stride train` resumed from it and the shell command ran.
"""

from __future__ import annotations

import io
import pickle
import time
from pathlib import Path

import pytest
from ckpt_helpers import Crash, CrashAt, cli, fit, reference_sha, summary_sha, write_config
from fault_helpers import canary_command, reseal
from hostile_pickle import TRUSTED_MODULE, popen_metadata, popen_path_resolves, with_call

from stride.checkpoint.safe_read import load_metadata_safely


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 24-step run with checkpoints step_00000021 and step_00000024 (keep_last = 2)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    fit(out)
    return out


def _metadata(run: Path, step: int = 24) -> bytes:
    return (run / "checkpoints" / f"step_{step:08d}" / ".metadata").read_bytes()


def test_the_dotted_popen_path_is_real_on_this_torch() -> None:
    if not popen_path_resolves():
        pytest.skip("torch no longer reaches subprocess.Popen by this path; the refusal tests below still run")


def test_a_dotted_global_reaching_popen_is_refused_and_nothing_runs(finished_run: Path, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    data = popen_metadata(_metadata(finished_run), canary_command(canary))
    with pytest.raises(pickle.UnpicklingError, match="not allowed|dotted"):
        load_metadata_safely(data)
    time.sleep(0.3)  # a Popen that had started would have written by now
    assert not canary.exists(), "the crafted metadata ran a shell command"


@pytest.mark.parametrize("module,name", [
    ("os", "system"), ("posix", "system"), ("builtins", "eval"), ("subprocess", "Popen"),
    (TRUSTED_MODULE, "torch.load"),  # dotted, through the trusted module
    (TRUSTED_MODULE, "Metadata.__init__"),  # dotted, even into an allowed class
    (TRUSTED_MODULE, "os.system"),
    ("torch.distributed.checkpoint.filesystem", "os.system"),
    ("torch", "load"), ("torch", "Tensor"),  # a torch attribute that is not a dtype
    ("torch", "float32.__class__"),
    ("torch.serialization", "load"),
    ("pathlib", "Path.write_text"),
    (TRUSTED_MODULE, "__builtins__"),
])
def test_any_global_outside_the_exact_allow_list_is_refused(finished_run: Path, module: str, name: str) -> None:
    def target() -> None:
        raise AssertionError("called")

    data = with_call(_metadata(finished_run), module, name, target, ())
    with pytest.raises(pickle.UnpicklingError):
        load_metadata_safely(data)


def test_the_reader_every_load_uses_reads_metadata_through_the_allow_list(finished_run: Path, tmp_path: Path) -> None:
    """`SafeFileSystemReader` is what `dcp.load` reads with on every rank: its `read_metadata` must be the safe one.
    Audit 16 had moved that method into another class, so the reader was DCP's own (a plain pickle.load) and only
    rank 0's check before the load used the allow-list (outside audit 18)."""
    import shutil

    from stride.checkpoint.safe_read import SafeFileSystemReader

    folder = tmp_path / "step"
    shutil.copytree(finished_run / "checkpoints" / "step_00000024", folder)
    canary = tmp_path / "CANARY"
    (folder / ".metadata").write_bytes(popen_metadata(_metadata(finished_run), canary_command(canary)))
    assert "read_metadata" in vars(SafeFileSystemReader)
    with pytest.raises(pickle.UnpicklingError):
        SafeFileSystemReader(folder).read_metadata()
    time.sleep(0.3)
    assert not canary.exists(), "the reader dcp.load uses ran a shell command"
    (folder / ".metadata").write_bytes(_metadata(finished_run))
    assert SafeFileSystemReader(folder).read_metadata().state_dict_metadata


def test_a_real_metadata_still_loads(finished_run: Path) -> None:
    md = load_metadata_safely(_metadata(finished_run))
    assert "model.embed.weight" in md.state_dict_metadata or md.state_dict_metadata


def test_allowed_classes_cannot_be_modified_by_a_pickle(finished_run: Path) -> None:
    """BUILD with slot state on a class object would set attributes on the class itself: refused and undone."""
    import torch.distributed.checkpoint.metadata as m

    before = dict(vars(m.Metadata))
    buf = io.BytesIO()
    buf.write(pickle.PROTO + bytes([4]))
    for s in (TRUSTED_MODULE, "Metadata"):
        raw = s.encode()
        buf.write(pickle.SHORT_BINUNICODE + bytes([len(raw)]) + raw)
    buf.write(pickle.STACK_GLOBAL + pickle.NONE + pickle.EMPTY_DICT)
    buf.write(pickle.SHORT_BINUNICODE + bytes([len(b"__eq__")]) + b"__eq__" + pickle.NONE + pickle.SETITEM)
    buf.write(pickle.TUPLE2 + pickle.BUILD + pickle.STOP)
    with pytest.raises(pickle.UnpicklingError):
        load_metadata_safely(buf.getvalue())
    assert dict(vars(m.Metadata)) == before


@pytest.mark.slow
def test_resume_from_a_crafted_checkpoint_runs_no_code_and_falls_back(tmp_path: Path) -> None:
    """The issue's scenario end to end: `stride train` on the run folder, with the newest checkpoint crafted."""
    cfg, out = write_config(tmp_path / "run.toml"), tmp_path / "run"
    canary = tmp_path / "CANARY"
    ref = reference_sha()
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(14)])  # checkpoints step 9 and 12 of the 24-step run, then a crash
    newest = out / "checkpoints" / "step_00000012"
    (newest / ".metadata").write_bytes(popen_metadata((newest / ".metadata").read_bytes(), canary_command(canary)))
    reseal(newest)
    res = cli(cfg, out)
    time.sleep(0.3)
    assert not canary.exists(), "resuming ran the shell command in the crafted .metadata"
    assert res.returncode == 0, res.stderr[-3000:]
    assert "skipped step_00000012: .metadata" in res.stderr, res.stderr[-3000:]
    assert "resuming from step_00000009" in res.stderr
    assert summary_sha(out) == ref  # the run continued from step 9 exactly as an uninterrupted one


def test_a_checkpoint_that_verifies_but_fails_to_load_falls_back(tmp_path: Path, capsys) -> None:
    """A shard replaced (manifest resealed): every check before loading passes, DCP's load fails; resume takes
    the next older checkpoint and ends where an uninterrupted run does. With none older: an error, not step 0."""
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(14)])  # step_00000009 and step_00000012
    newest = out / "checkpoints" / "step_00000012"
    for shard in newest.glob("*.distcp"):
        shard.write_bytes(pickle.dumps({"not": "tensors"}) * 50)
    reseal(newest)
    s = fit(out)
    err = capsys.readouterr().err
    assert "could not load step_00000012" in err and "falling back to step_00000009" in err, err[-2000:]
    assert s["checkpoint"]["resumed_from"] == "step_00000009" and s["params_sha256"] == reference_sha()
    out = tmp_path / "run2"  # (a finished run is not loaded again at all: the rerun finds it finished)
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(14)])
    for folder in (out / "checkpoints").glob("step_*"):  # now every one fails to load
        for shard in folder.glob("*.distcp"):
            shard.write_bytes(b"\0" * 100)
        reseal(folder)
    from stride.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="no older valid checkpoint is left"):
        fit(out)
