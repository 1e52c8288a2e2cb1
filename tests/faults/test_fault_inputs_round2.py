"""Hostile inputs, second audit: cases the first (issue 19) did not reach.

Each refusal is stride's one line naming the input (exit 1 or 2, no traceback), and nothing half-written
is left that a later command takes as valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_helpers import REPO, one_line_error, stride_main, tree_digest

from stride.data.store import open_store

QUICK = str(REPO / "configs" / "quickstart.toml")


# -- config ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../escape", "a/b", "", "a\nb"])
def test_a_run_name_that_is_not_one_folder_name_is_refused(tmp_path: Path, monkeypatch, name: str) -> None:
    """train.name ends the run directory's name: `../../x` wrote the run two folders up, outside runs/."""
    monkeypatch.chdir(tmp_path)
    before = tree_digest(tmp_path)
    res = stride_main("train", QUICK, "--set", f"train.name={name!r}".replace("'", '"'), "--set", "train.steps=1")
    one_line_error(res, "train.name")
    assert tree_digest(tmp_path) == before


# -- ingestion -------------------------------------------------------------------------------------------

def _csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


OK = "timestamp,symbol,close,vol\n2024-01-01T00:00:00,A,1.0,2\n2024-01-01T00:01:00,A,1.1,3\n"


@pytest.mark.parametrize(("text", "args", "words"), [
    # no feature column: a store of 0 columns was committed, then every reader failed on it (a traceback)
    ("timestamp,symbol\n2024-01-01T00:00:00,A\n", [], ["no feature columns"]),
    # the same column twice: committed a store whose manifest open_store then refused
    (OK, ["--columns", "close,close"], ["'close'", "more than once"]),
    # a row without its symbol: stored under the symbol "None"
    ("timestamp,symbol,close\n2024-01-01T00:00:00,A,1\n2024-01-01T00:01:00,,2\n", [], ["symbol", "row 1"]),
    (OK, ["--columns", "timestamp"], ["'timestamp'", "is the timestamp column"]),
])
def test_ingest_refuses_a_table_it_cannot_store_faithfully(tmp_path: Path, text: str, args: list[str],
                                                           words: list[str]) -> None:
    src = _csv(tmp_path / "in.csv", text)
    out = tmp_path / "store"
    one_line_error(stride_main("data", "ingest", str(src), "--out", str(out), *args), str(src), *words)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["in.csv"]  # no temporary folder either


def test_a_manifest_with_no_columns_is_refused(tmp_path: Path) -> None:
    src = _csv(tmp_path / "in.csv", OK)
    store = tmp_path / "store"
    assert stride_main("data", "ingest", str(src), "--out", str(store)).code == 0
    man = (store / "manifest.json").read_text()
    (store / "manifest.json").write_text(man.replace('"close",', "").replace('"vol"', ""))
    with pytest.raises(ValueError, match="non-empty list"):
        open_store(store)
    one_line_error(stride_main("data", "inspect", str(store)), "manifest.json", "columns")


# -- run directories read by `stride top` ----------------------------------------------------------------

@pytest.mark.parametrize(("files", "words"), [
    ({"summary.json": '{"steps": 3,'}, ["summary.json", "not valid JSON"]),  # was a JSONDecodeError traceback
    ({"summary.json": "[]"}, ["summary.json", "not the object stride writes"]),
    ({"metrics.jsonl": '{"step": 1, "loss": 1.0}\nnot json\n'}, ["metrics.jsonl", "not JSON"]),
])
def test_top_refuses_a_corrupt_run_file_in_one_line(tmp_path: Path, files: dict[str, str], words: list[str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    one_line_error(stride_main("top", str(tmp_path), "--once"), *words)


@pytest.mark.parametrize("record", [
    '{"step": 1, "loss": NaN, "lr": 0.001, "step_time_s": 0.1}',  # a run whose loss went NaN: was a ValueError
    '{"step": 1, "loss": 1.0}',  # fields missing: was a KeyError
    '{"step": 1, "loss": "x", "lr": null, "step_time_s": "y", "breakdown_s": [1]}',  # wrong types
])
def test_top_shows_a_run_whose_records_are_odd(tmp_path: Path, record: str) -> None:
    (tmp_path / "metrics.jsonl").write_text(f'{record}\n{record}\n')
    (tmp_path / "config.toml").write_text('[train]\nsteps = "many"\n')
    res = stride_main("top", str(tmp_path), "--once")
    assert res.code == 0, res.err
    assert "step" in res.out and "/ ?" in res.out


# -- a store changed after ingestion -------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [[], ["--set", "data.batch_dtype=bfloat16", "--set", 'data.columns=["f2","f1"]']])
def test_a_nan_written_into_a_store_after_ingestion_is_named_before_training(tmp_path: Path, extra: list[str]) -> None:
    """ingest never stores NaN; one written into values.bin later trained to a NaN loss with exit 0."""
    import json

    import numpy as np
    from data_fixtures import write_parquet_dataset

    from stride.data.ingest import ingest

    write_parquet_dataset(tmp_path / "src")
    store = ingest(tmp_path / "src", tmp_path / "store")
    n, c = open_store(store).values.shape
    vals = np.memmap(store / "values.bin", dtype=np.float32, mode="r+", shape=(n, c))
    vals[7, 2] = np.nan  # column 2 is f2 (timestamp and symbol are not features)
    vals.flush()
    del vals
    man = json.loads((store / "manifest.json").read_text())  # a store committed before sampled digests: a current
    for info in man["files"].values():  # one refuses the changed file at open (tests/data/test_store_changed.py)
        del info["sample"]
    (store / "manifest.json").write_text(json.dumps(man))
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[model]\nname = "mlp"\n[data]\nsource = "store"\nstore = "{store}"\nseq_len = 4\nhorizons = [1]\n'
                   '[train]\nsteps = 2\nbatch_size = 4\nval_every = 0\n')
    res = stride_main("train", str(cfg), "--out", str(tmp_path / "run"), "--no-progress", *extra)
    one_line_error(res, str(store), "'f2'", "row 7", "--verify")
    assert not (tmp_path / "run" / "summary.json").exists()


# -- a checkpoint's meta.json ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ckpt_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ckpt_helpers import fit

    out = tmp_path_factory.mktemp("ck") / "run"
    fit(out, "train.steps=6")  # step_00000003 and step_00000006
    (out / "summary.json").unlink()  # a run that died before its summary: it resumes
    return out


META_EDITS = {  # each was a traceback (AttributeError / TypeError) out of the resume
    "config is a string": lambda m: m.update(config="x"),
    "a section is a string": lambda m: m["config"].update(model="x"),
    "extended_from is a number": lambda m: m.update(extended_from=5),
    "world_size is a string": lambda m: m.update(world_size="x"),  # was accepted and printed as "world size: x"
    "train.steps is a string": lambda m: m["config"]["train"].update(steps="x"),
}


def _edit_meta(run: Path, tmp_path: Path, edit: str) -> Path:
    """A copy of the run whose newest checkpoint's meta.json has `edit`, its manifest resealed to match."""
    import json
    import shutil

    from fault_helpers import reseal

    out = tmp_path / "run"
    shutil.copytree(run, out)
    folder = out / "checkpoints" / "step_00000006"
    meta = json.loads((folder / "meta.json").read_text())
    META_EDITS[edit](meta)
    (folder / "meta.json").write_text(json.dumps(meta))
    reseal(folder)  # the manifest agrees: only the meta's shape is wrong
    return out


@pytest.mark.parametrize("edit", list(META_EDITS))
def test_a_meta_json_of_the_wrong_shape_is_not_a_valid_checkpoint(ckpt_run: Path, tmp_path: Path, edit: str) -> None:
    from stride.checkpoint.safe_read import check_checkpoint

    verdict = check_checkpoint(_edit_meta(ckpt_run, tmp_path, edit) / "checkpoints" / "step_00000006", 6)
    assert not verdict.ok and verdict.reason.startswith("meta.json: "), verdict.reason


def test_resume_skips_a_meta_json_of_the_wrong_shape_and_falls_back(ckpt_run: Path, tmp_path: Path) -> None:
    import json

    from ckpt_helpers import write_config
    from fault_helpers import stride_cli

    out = _edit_meta(ckpt_run, tmp_path, "config is a string")
    res = stride_cli("train", str(write_config(tmp_path / "c.toml", "train.steps=6")), "--out", str(out),
                     "--no-progress")
    assert res.code == 0 and "Traceback" not in res.err, res.err[-2000:]
    assert "skipped step_00000006: meta.json: config is not a table" in res.err
    assert json.loads((out / "summary.json").read_text())["checkpoint"]["resumed_from"] == "step_00000003"


# -- the training state inside a checkpoint (JSON strings DCP stores) ----------------------------------------

def _rewrite_train_state(folder: Path, edit) -> None:
    """Load every entry of the checkpoint in `folder`, apply `edit` to the dict, save it back with DCP and
    reseal the manifest: a checkpoint crafted with stride's own tools."""
    import json

    import torch
    import torch.distributed.checkpoint as dcp
    from fault_helpers import reseal
    from torch.distributed.checkpoint import FileSystemWriter

    from stride.checkpoint.safe_read import SafeFileSystemReader, SafeLoadPlanner

    md = SafeFileSystemReader(folder).read_metadata()
    state = {k: torch.empty(v.size, dtype=v.properties.dtype) if hasattr(v, "size") else ""
             for k, v in md.state_dict_metadata.items()}
    dcp.load(state, storage_reader=SafeFileSystemReader(folder), planner=SafeLoadPlanner(), no_dist=True)
    edit(state)
    for p in [*folder.glob("__*.distcp"), folder / ".metadata"]:
        p.unlink()
    dcp.save(state, storage_writer=FileSystemWriter(folder), no_dist=True)
    man = json.loads((folder / "manifest.json").read_text())
    man["files"] = {p.name: {} for p in folder.iterdir() if p.name != "manifest.json"}
    (folder / "manifest.json").write_text(json.dumps(man))
    reseal(folder)


def _train_json(**changes):
    import json

    return lambda st: st.update(train=json.dumps({**json.loads(st["train"]), **changes}))


TRAIN_STATE_EDITS = {  # each was a traceback (JSONDecodeError, KeyError, ValueError, AttributeError) or accepted
    "not JSON": lambda st: st.update(train="{not json"),
    "step is a string": _train_json(step="x"),
    "step is negative": _train_json(step=-100),  # was accepted: "continuing at step -100"
    "scheduler is a number": _train_json(scheduler=5),
    "scheduler sets an attribute": lambda st: _train_json(scheduler={"optimizer": 1})(st),
    "data position of no kind": lambda st: st.update({"rank0.data": '{"kind": "zzz"}'}),  # was accepted
}


@pytest.mark.parametrize("edit", list(TRAIN_STATE_EDITS))
def test_a_crafted_training_state_is_refused_before_it_is_applied(ckpt_run: Path, tmp_path: Path, edit: str) -> None:
    import shutil

    import torch.distributed.checkpoint as dcp

    from stride.checkpoint import train_state
    from stride.checkpoint.safe_read import SafeFileSystemReader, SafeLoadPlanner
    from stride.train.trainer import Trainer

    folder = tmp_path / "step_00000006"
    shutil.copytree(ckpt_run / "checkpoints" / "step_00000006", folder)
    _rewrite_train_state(folder, TRAIN_STATE_EDITS[edit])
    from ckpt_helpers import ckpt_config

    trainer = Trainer(config=ckpt_config("train.steps=6"), write_run_dir=False)
    trainer.setup()
    keys = set(SafeFileSystemReader(folder).read_metadata().state_dict_metadata)
    loaded = train_state.load_template(trainer, keys)
    dcp.load(loaded, storage_reader=SafeFileSystemReader(folder), planner=SafeLoadPlanner(), no_dist=True)
    assert train_state.problem(trainer, loaded, 6) is not None
    untouched = Trainer(config=ckpt_config("train.steps=6"), write_run_dir=False)
    untouched.setup()
    loaded = train_state.load_template(untouched, keys)
    dcp.load(loaded, storage_reader=SafeFileSystemReader(ckpt_run / "checkpoints" / "step_00000006"),
             planner=SafeLoadPlanner(), no_dist=True)
    assert train_state.problem(untouched, loaded, 6) is None  # what stride wrote passes


def test_resume_falls_back_past_a_crafted_training_state(tmp_path: Path) -> None:
    import json

    from ckpt_helpers import Crash, CrashAt, fit, reference_sha, write_config
    from fault_helpers import stride_cli

    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, "train.steps=9", callbacks=[CrashAt(7)])  # stopped midway: step_00000003 and step_00000006
    _rewrite_train_state(out / "checkpoints" / "step_00000006", _train_json(step=-100))
    res = stride_cli("train", str(write_config(tmp_path / "c.toml", "train.steps=9")), "--out", str(out),
                     "--no-progress")
    assert res.code == 0 and "Traceback" not in res.err, res.err[-2000:]
    assert "step_00000006 (its training state is at step -100, not the folder's step 6)" in res.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checkpoint"]["resumed_from"] == "step_00000003"
    assert summary["params_sha256"] == reference_sha("train.steps=9")  # the fallback redid steps 4-9 exactly


# -- what `stride compare` and `stride report` read ------------------------------------------------------------

def _summary_run(tmp_path: Path, **changes) -> Path:
    """A run folder as `stride train` leaves it (summary.json, metrics.jsonl), with `changes` in its summary."""
    import json

    run = tmp_path / "run"
    run.mkdir(parents=True)
    summary = {"name": "run", "steps": 3, "samples_per_s": 100.0, "mfu": 0.01, "peak_mem_bytes": 1000,
               "step_time_breakdown_s": {"forward": 0.01, "backward": 0.02}, "time_to_target_s": None,
               "final_train_loss": 1.0, "final_val_loss": None}
    (run / "summary.json").write_text(json.dumps({**summary, **changes}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 1.0 / i, "time_s": 0.1 * i}) + "\n"
                                               for i in range(1, 4)))
    return run


@pytest.mark.parametrize(("changes", "words"), [  # each was a TypeError/AttributeError traceback
    ({"samples_per_s": "fast"}, ["throughput.median", "'fast'"]),
    ({"step_time_breakdown_s": [1, 2]}, ["step_time_breakdown_s"]),
    ({"peak_mem_bytes": "x"}, ["peak_mem_bytes"]),
    ({"name": 5}, ["name 5"]),
    ({"final_val_loss": "x"}, ["final_val_loss"]),
])
def test_a_run_summary_of_the_wrong_types_is_one_line(tmp_path: Path, changes: dict, words: list[str]) -> None:
    run = _summary_run(tmp_path, **changes)
    other = _summary_run(tmp_path / "b")
    one_line_error(stride_main("compare", str(run), str(other)), "summary.json", *words)
    one_line_error(stride_main("report", str(run)), "summary.json", *words)
    assert not (run / "report.html").exists()


def test_a_diverged_run_is_reported(tmp_path: Path) -> None:
    """A run whose loss went NaN is a result to report: it was 'cannot convert float NaN to integer'."""
    import json

    run = _summary_run(tmp_path, final_train_loss=float("nan"))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": float("nan"), "time_s": 0.1 * i})
                                               + "\n" for i in range(1, 4)))  # NaN from the first logged step
    res = stride_main("report", str(run))
    assert res.code == 0, res.err
    assert (run / "report.html").is_file()


@pytest.mark.parametrize("price", ["nan", "-5", "inf", "true"])
def test_a_price_that_is_not_one_is_refused(tmp_path: Path, price: str) -> None:
    """A negative or NaN price printed a negative or NaN cost."""
    prices = tmp_path / "prices.toml"
    prices.write_text(f"[prices]\ncpu = {price}\n")
    one_line_error(stride_main("report", str(_summary_run(tmp_path)), "--prices", str(prices)), str(prices))


# -- perfmodel hardware files ----------------------------------------------------------------------------------

@pytest.mark.parametrize("line", ["memory_gib = nan", "tdp_w = inf", "peak_tflops = { bf16 = inf }"])
def test_a_hardware_file_with_nan_or_inf_is_refused(tmp_path: Path, line: str) -> None:
    """memory_gib = nan passed the `v < 0` check: `stride plan` printed 'needs 79.3 GiB of nan'."""
    hw = tmp_path / "hw.toml"
    hw.write_text(f'[hardware.x]\nbase = "h100-sxm"\n{line}\n')
    res = stride_main("plan", "--model", "llama3-8b", "--hardware-file", str(hw), "--hardware", "x", "--devices", "8")
    one_line_error(res, str(hw), line.split()[0])


# -- sweep grids -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("grid", [["train.seed=0..100000000"], ["train.seed=0..1000", "data.seed=0..1000"]])
def test_a_grid_too_large_to_list_is_refused_before_it_is_built(tmp_path: Path, grid: list[str]) -> None:
    """train.seed=0..100000000 listed 10^8 configs in memory (the command never answered)."""
    args = [a for g in grid for a in ("--grid", g)]
    res = stride_main("sweep", QUICK, *args, "--out", str(tmp_path / "sweep"))
    one_line_error(res, "--grid", "points")
    assert not (tmp_path / "sweep").exists()
