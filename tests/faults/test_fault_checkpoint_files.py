"""Issue 19, case 6 (a manifest naming files outside its folder) and generated hostile checkpoint files.

Every path a checkpoint names (manifest entries, the storage entries of `.metadata`) must be a file inside the
checkpoint folder; a checkpoint that breaks this is skipped with the reason and resume falls back. Generated
cases: arbitrary manifest JSON and arbitrary or mutated `.metadata` bytes never raise out of the checks,
never run code and never change the allowed classes.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from ckpt_helpers import fit, reference_sha
from fault_helpers import GEN, reseal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stride.checkpoint import verify
from stride.checkpoint.manifest import CHECKSUM, checksum_file
from stride.checkpoint.safe_read import _global_state, check_checkpoint, load_metadata_safely

GEN = {**GEN, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ck") / "run"
    fit(out, "train.steps=6")  # step_00000003 and step_00000006
    return out


@pytest.fixture
def ckpt(run: Path, tmp_path: Path) -> Path:
    """A private copy of step_00000006 to damage."""
    dst = tmp_path / "ck" / "step_00000006"
    shutil.copytree(run / "checkpoints" / "step_00000006", dst)
    return dst


def _add_entry(folder: Path, rel: str, target: Path) -> None:
    """List `rel` in the manifest with the true size and checksum of `target` (an attacker's careful edit)."""
    m = json.loads((folder / "manifest.json").read_text())
    m["files"][rel] = {"bytes": target.stat().st_size, CHECKSUM: checksum_file(target)}
    (folder / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "symlinked_dir"])
def test_a_manifest_naming_a_file_outside_its_folder_is_refused(ckpt: Path, tmp_path: Path, how: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the checkpoint")
    if how == "dotdot":
        rel = os.path.relpath(secret, ckpt)
    elif how == "absolute":
        rel = str(secret)
    elif how == "symlink":
        rel = "link.txt"
        os.symlink(secret, ckpt / "link.txt")
    else:
        rel = "sub/secret.txt"
        os.symlink(tmp_path, ckpt / "sub")
    _add_entry(ckpt, rel, secret)
    verdict = verify(ckpt, 6)
    assert not verdict.ok and "outside" in verdict.reason, verdict.reason


def test_metadata_naming_a_shard_outside_the_folder_is_refused(ckpt: Path, tmp_path: Path) -> None:
    md = pickle.loads((ckpt / ".metadata").read_bytes())  # test-only: our own checkpoint
    info = next(iter(md.storage_data.values()))
    shard = ckpt / info.relative_path
    moved = tmp_path / "elsewhere.distcp"
    shutil.copy(shard, moved)
    info.relative_path = os.path.relpath(moved, ckpt)
    (ckpt / ".metadata").write_bytes(pickle.dumps(md, protocol=4))
    reseal(ckpt)
    verdict = check_checkpoint(ckpt, 6)
    assert not verdict.ok and "outside the folder" in verdict.reason, verdict.reason


def test_resume_skips_an_outward_manifest_and_falls_back(run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    (out / "summary.json").unlink()  # a run that died before its summary: it resumes (a finished one is left alone)
    _add_entry(out / "checkpoints" / "step_00000006", "../../../../../../../../etc/hostname", Path("/etc/hostname"))
    s = fit(out, "train.steps=6")
    assert s["checkpoint"]["resumed_from"] == "step_00000003"
    assert s["params_sha256"] == reference_sha("train.steps=6")  # the fallback redid steps 4-6 exactly
    assert "skipped step_00000006: manifest.json names" in capsys.readouterr().err


def _restore(run: Path, ckpt: Path) -> None:
    for name in ("manifest.json", ".metadata"):
        shutil.copy(run / "checkpoints" / ckpt.name / name, ckpt / name)


# -- generated --------------------------------------------------------------------------------------------

json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=12)
hostile_name = st.sampled_from(["..", "../x", "/etc/passwd", "a/../../b", "\x00", "", ".metadata/..", "~", "//x",
                                "__0_0.distcp", ".metadata", "meta.json", "x" * 300])


@settings(**GEN, max_examples=100)
@given(field=st.sampled_from(["format", "files", "step", "checksum", None]), value=json_value,
       name=hostile_name, info=json_value)
def test_any_manifest_json_is_judged_without_an_exception(run: Path, ckpt: Path, field, value, name, info) -> None:
    _restore(run, ckpt)  # the folder is shared by the examples
    m = json.loads((ckpt / "manifest.json").read_text())
    if field is None:
        m["files"][name] = info
    else:
        m[field] = value
    (ckpt / "manifest.json").write_text(json.dumps(m))
    verdict = verify(ckpt, 6)
    if verdict.ok:  # only if the change left a manifest that really describes the folder
        assert all((ckpt / r).resolve().parent == ckpt.resolve() for r in verdict.manifest["files"])


@settings(**GEN, max_examples=150)
@given(data=st.binary(max_size=2000))
def test_any_bytes_as_manifest_or_metadata_are_refused_cleanly(run: Path, ckpt: Path, data: bytes) -> None:
    _restore(run, ckpt)
    before = _global_state()
    (ckpt / ".metadata").write_bytes(data)
    with pytest.raises(pickle.UnpicklingError):
        load_metadata_safely(data, ckpt)
    assert not check_checkpoint(ckpt, 6).ok
    (ckpt / "manifest.json").write_bytes(data)
    assert not verify(ckpt, 6).ok
    assert _global_state() == before


@settings(**GEN, max_examples=150)
@given(cuts=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
       truncate=st.one_of(st.none(), st.integers(0, 10**6)))
def test_mutated_metadata_is_loaded_or_refused_never_anything_else(run: Path, cuts, truncate) -> None:
    """Flip bytes of (or cut) a real `.metadata`: the result loads as a Metadata or raises UnpicklingError."""
    data = bytearray((run / "checkpoints" / "step_00000006" / ".metadata").read_bytes())
    for at, byte in cuts:
        data[at % len(data)] = byte
    if truncate is not None:
        data = data[: truncate % len(data)]
    before = _global_state()
    with contextlib.suppress(pickle.UnpicklingError):  # anything else fails the test
        load_metadata_safely(bytes(data), run / "checkpoints" / "step_00000006")
    assert _global_state() == before
