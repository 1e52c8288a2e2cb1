"""`stride repro RUN_DIR [--out DIR] [--tolerance R] [--nproc N] [--json]`: re-run a recorded run and compare.

The run folder's files are input like any other (`check_run_files`, before anything is re-run): summary.json,
env.json and config.toml are read only as regular files (one a link to /dev/zero was "env.json not found"), and
the summary fields the comparison reads are checked first: an `extended_from` of text or below 1, or a final loss
that is no number, was a traceback, the last after the whole re-run (audit 14, L1). The config's `model.name` (and
any other `module:factory` value) imports that module, as `stride train` would: repro only folders you trust
(docs/launch.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import tomllib
from pathlib import Path
from typing import Any

from stride.errors import StrideError
from stride.files.input_file import InputFileError, read_input_text

RUN_FILE_MAX_BYTES = 64 << 20  # summary.json, env.json, config.toml: KiBs


class RunFolderError(StrideError):
    """A file of the recorded run that is not what `stride train` writes: one line naming it (exit status 2)."""

    exit_code = 2


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a finished run directory (config.toml, env.json, summary.json)")
    p.add_argument("--out", default=None, help="directory for the re-run (default: <RUN_DIR>-repro)")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="relative final-loss tolerance for non-deterministic runs (default 1e-5)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="change a recorded value for the re-run, e.g. --set train.threads=1")
    p.add_argument("--nproc", type=int, default=None,
                   help="processes for the re-run (default: the recorded world_size; more than 1 runs "
                        "`stride train --nproc N`)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stride.launch.repro import reproduce

    if not args.tolerance >= 0:  # NaN compares False with everything: it made every final loss "within" it
        raise SystemExit(f"stride repro: --tolerance = {args.tolerance} must be >= 0")
    check_run_files(Path(args.run_dir))
    rep = reproduce(args.run_dir, args.out, args.tolerance, args.overrides, args.nproc)
    if args.json:
        print(json.dumps(rep.to_dict()))
        return 0 if rep.matches else 1
    print(f"original: {rep.original}\nre-run:   {rep.rerun}")
    print(f"mode: {'deterministic (bitwise expected)' if rep.deterministic else 'non-deterministic (tolerance)'}")
    print(f"final loss: {rep.loss_original!r} -> {rep.loss_rerun!r} (rel. diff {rep.loss_rel_diff:.2e})")
    if not rep.config_hash_match:
        print("warning: the recorded config.toml does not hash to the recorded config_hash "
              "(a None-valued field is not written to TOML, or the schema changed)")
    was = "not recorded" if rep.world_size_original is None else f"{rep.world_size_original} ({rep.parallel_original})"
    print(f"world size: {was} -> {rep.world_size_rerun} ({rep.parallel_rerun}) in the re-run")
    if rep.layout_note:  # a layout change mid-run: the environment line alone would make the runs look alike
        print(f"layout history: {rep.layout_note}")
    if rep.env_diff:
        print("environment differs:")
        for key, (a, b) in rep.env_diff.items():
            print(f"  {key}: {a} -> {b}")
    elif rep.layout_differs:
        print("environment: same code version, packages and hardware, but not the same layout (above)")
    else:
        print("environment: same code version, packages and hardware")
    print(rep.verdict)
    return 0 if rep.matches else 1


def _read_run_file(path: Path, what: str) -> str | None:
    """The text of a run file, None where there is nothing at `path` (`reproduce` names what is missing); a FIFO, a
    device, a directory, an oversized or undecodable file is a RunFolderError naming it."""
    if not os.path.lexists(path) or not path.parent.is_dir():
        return None
    try:
        return read_input_text(path, limit=RUN_FILE_MAX_BYTES, what=what)
    except InputFileError as exc:
        raise RunFolderError(str(exc)) from None


def _json_object(path: Path, what: str) -> dict[str, Any] | None:
    text = _read_run_file(path, what)
    if text is None:
        return None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise RunFolderError(f"{path}: not valid JSON ({exc}); the run may not have finished") from None
    if not isinstance(obj, dict):
        raise RunFolderError(f"{path}: holds a JSON {type(obj).__name__}, not the object stride writes")
    return obj


def _shown(v: Any) -> str:
    return json.dumps(v)[:60] if not isinstance(v, float) else repr(v)


def summary_problem(summary: dict[str, Any], steps: int | None) -> str | None:
    """The first field of a recorded summary.json that repro reads and that is not what `stride train` writes (None:
    none): the hashes it compares (text), the final loss (a finite number: a run that diverged recorded none),
    the segments of an extended run (`checkpoint.extended_from`: increasing step counts >= 1, each below the
    config's `train.steps`, as `steps` gives it), and the tables it reads (`checkpoint`, `inputs_from`)."""
    for key in ("params_sha256", "config_hash"):
        if key in summary and not isinstance(summary[key], str):
            return f"{key} = {_shown(summary[key])} is not text (a hash)"
    if "final_train_loss" in summary:
        loss = summary["final_train_loss"]
        if not isinstance(loss, int | float) or isinstance(loss, bool) or not math.isfinite(loss):
            why = " (the run diverged: a diverged run has no final loss to compare)" \
                if summary.get("status") == "diverged" else ""
            return f"final_train_loss = {_shown(loss)} is not a finite number{why}"
    for key in ("checkpoint", "inputs_from"):
        if summary.get(key) is not None and not isinstance(summary[key], dict):
            return f"{key} = {_shown(summary[key])} is not a table"
    ck = summary.get("checkpoint") or {}
    ext = ck.get("extended_from")
    if ext is not None:
        if not isinstance(ext, list) or not all(type(s) is int and s >= 1 for s in ext) \
                or any(a >= b for a, b in zip(ext, ext[1:], strict=False)):
            return (f"checkpoint.extended_from = {_shown(ext)} is not a list of increasing step counts >= 1 (the "
                    "train.steps of each earlier segment of an extended run)")
        if ext and steps is not None and ext[-1] >= steps:
            return (f"checkpoint.extended_from = {_shown(ext)} does not end below the config's train.steps = {steps} "
                    "(a run is extended to more steps)")
    changes = ck.get("resume_changes")
    if changes is not None and not (isinstance(changes, list) and all(isinstance(c, str) for c in changes)):
        return f"checkpoint.resume_changes = {_shown(changes)} is not a list of text"
    return None


def check_run_files(run_dir: Path) -> None:
    """Before anything is re-run: summary.json, env.json and config.toml are regular files (a RunFolderError naming
    one that is a FIFO, a device, a directory, ...), the JSON ones objects, and the summary fields repro reads what
    `stride train` writes (`summary_problem`). What is missing is left to `reproduce`, which says so."""
    config = _read_run_file(run_dir / "config.toml", "run config")
    steps = None
    if config is not None:
        with contextlib.suppress(ValueError, RecursionError, AttributeError):  # load_config names what is wrong
            steps = tomllib.loads(config).get("train", {}).get("steps")
    summary = _json_object(run_dir / "summary.json", "run summary")
    _json_object(run_dir / "env.json", "run environment file")
    if summary is not None and (why := summary_problem(summary, steps if type(steps) is int else None)):
        raise RunFolderError(f"{run_dir / 'summary.json'}: {why}: edited or damaged; nothing was re-run")
