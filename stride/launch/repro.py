"""Re-run a recorded run from its run directory and say whether the result matches.

A run directory holds the resolved `config.toml` (and a copy, `config.recorded.toml`, that names the keys of a
config.toml edited after the run), `env.json` (git commit, dirty state, package versions, hardware) and
`summary.json` (params_sha256, config_hash, final loss). In deterministic
mode the re-run must reproduce the parameters bit for bit; otherwise the final loss must agree
within a relative tolerance. Differences in code version and packages are reported beside the
verdict because they are the usual reason a match fails.

The re-run uses the recorded world size: more than one process runs `stride train --nproc N` (torchrun), as the
command line would, since DDP's reduction order changes the last bits. A run whose layout changed mid-run (resumed
under another world size or [parallel] layout; summary.json keeps its last resume's changes) cannot be replayed by
one launch: the report says so and names it as the likely cause of a mismatch.

The run folder's files are input like any other (`check_run_files`, first in `reproduce`, before anything is
re-run): summary.json, env.json and config.toml are read only as regular files (one a link to /dev/zero was
"env.json not found"), and the summary fields the comparison reads are checked first: an `extended_from` of text or
below 1, or a final loss that is no number, was a traceback, the last after the whole re-run (audit 14, L1).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stride.config import ConfigError, RunConfig, config_hash, load_config
from stride.config.loader import table_hash
from stride.errors import StrideError
from stride.files.input_file import InputFileError, json_object, read_input_text
from stride.files.strict_json import finite_number

HARDWARE_KEYS = ("cpu_model", "gpus")


class ReproError(StrideError):
    """The re-run itself failed (its own messages say why)."""


@dataclass
class ReproReport:
    original: Path
    rerun: Path
    deterministic: bool
    params_match: bool
    loss_original: float
    loss_rerun: float
    loss_rel_diff: float
    tolerance: float
    config_hash_match: bool
    env_diff: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    world_size_original: int | None = None  # None: not recorded (an older stride)
    world_size_rerun: int = 1
    parallel_original: str | None = None  # summary.json's `parallel` (single, ddp, fsdp, ...)
    parallel_rerun: str | None = None
    layout_changes: list[str] = field(default_factory=list)  # the recorded run's last resume: layout changes
    layout_note: str | None = None  # why one launch cannot replay the recorded layout history, if it cannot

    @property
    def layout_differs(self) -> str | None:
        """What differs between the recorded run's layout and the re-run's, in words (None: the same)."""
        if self.layout_note:
            return self.layout_note
        wo, wr = self.world_size_original, self.world_size_rerun
        if wo is not None and wo != wr:
            return f"the re-run ran on {wr} process(es), the recorded run on {wo}"
        po, pr = self.parallel_original, self.parallel_rerun
        if po is not None and pr is not None and po != pr:
            return f"the re-run's layout is {pr}, the recorded run's {po}"
        return None

    @property
    def other_hardware(self) -> bool:
        """The re-run ran on another CPU model or GPUs: vectorised kernels round differently across
        CPU families (fused AdamW differs in the last bit between AMD EPYC and Intel), so bitwise
        equality is only expected on the same hardware."""
        return any(k in self.env_diff for k in HARDWARE_KEYS)

    @property
    def matches(self) -> bool:
        """Bitwise parameters in deterministic mode on the same hardware; otherwise the final loss
        within tolerance."""
        if self.deterministic and not self.other_hardware:
            return self.params_match
        return self.params_match or self.loss_rel_diff <= self.tolerance

    @property
    def verdict(self) -> str:
        if self.params_match:
            return "bitwise match (params_sha256 equal)"
        if self.matches:
            why = ""
            if self.deterministic:
                why = " (other hardware: bitwise equality is expected on the same CPU/GPU only)"
            return (f"match within tolerance (final loss rel. diff {self.loss_rel_diff:.2e} <= {self.tolerance:.0e})"
                    + why)
        if self.deterministic:
            return "MISMATCH: deterministic run, but params_sha256 differs" + self._likely_cause()
        return f"MISMATCH: final loss rel. diff {self.loss_rel_diff:.2e} > {self.tolerance:.0e}" + self._likely_cause()

    def _likely_cause(self) -> str:
        """Another layout reduces gradients in another order (and a mid-run change is not replayed at all)."""
        cause = self.layout_differs
        if not self.config_hash_match:  # re-run on purpose with --allow-edited-config: the first cause
            cause = "config.toml was edited after the run" + (f"; {cause}" if cause else "")
        return f" (likely cause: {cause})" if cause else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "original": str(self.original), "rerun": str(self.rerun), "deterministic": self.deterministic,
            "matches": self.matches, "verdict": self.verdict, "params_match": self.params_match,
            "loss_original": self.loss_original, "loss_rerun": self.loss_rerun,
            "loss_rel_diff": self.loss_rel_diff, "tolerance": self.tolerance,
            "config_hash_match": self.config_hash_match,
            "env_diff": {k: list(v) for k, v in self.env_diff.items()},
            "world_size_original": self.world_size_original, "world_size_rerun": self.world_size_rerun,
            "parallel_original": self.parallel_original, "parallel_rerun": self.parallel_rerun,
            "layout_changes": list(self.layout_changes), "layout_note": self.layout_note,
        }


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path} not found: is {path.parent} a finished stride run directory?")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); the run may not have finished") from exc


def env_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """What differs between two env.json fingerprints: code version, packages, Python, hardware."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in ("git_commit", "git_dirty", "python", "torch_cuda", "cpu_model", "cpu_count", "gpus", "hostname"):
        if a.get(key) != b.get(key):
            out[key] = (a.get(key), b.get(key))
    pa, pb = a.get("packages") or {}, b.get("packages") or {}
    for pkg in sorted(set(pa) | set(pb)):
        if pa.get(pkg) != pb.get(pkg):
            out[f"packages.{pkg}"] = (pa.get(pkg), pb.get(pkg))
    return out


def _rel_diff(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def layout_history(summary: dict[str, Any]) -> tuple[list[str], str | None]:
    """The recorded run's layout changes at its last resume (`checkpoint.resume_changes`: world size, [parallel]
    and execution keys) and, when there are any, the line saying one launch cannot replay them."""
    ck = summary.get("checkpoint") or {}
    changes = [str(c) for c in ck.get("resume_changes") or [] if _changes_numbers(str(c))]
    if not changes:
        return [], None
    note = (f"the recorded run changed layout or execution when it resumed at step {summary.get('start_step')} "
            f"({'; '.join(changes)}); one launch cannot replay that")
    return changes, note




def _changes_numbers(change: str) -> bool:
    """Whether a `checkpoint.resume_changes` line ("key: a (checkpoint) -> b (now)") is one that can change what
    a run computes: the world size, a [parallel] degree or schedule, grad_accum, kernels, optim.impl, device..."""
    from stride.checkpoint.config_diff import SAME_NUMBERS

    # those that leave the numbers as they were do not count (a review found `data.prefetch` reported as a layout
    # change a launch "cannot replay", beside a bitwise match)
    return change.split(":", 1)[0].strip() not in SAME_NUMBERS


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Child processes write to stderr meanwhile: stdout carries the report alone (one JSON object with --json)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def one_process_advice(cfg: RunConfig) -> str:
    """How to re-run in one process: `--nproc 1`, and each [parallel] degree the config sets above 1 set to 1
    (a layout of tp = 2 does not fit one process: `--nproc 1` alone was refused)."""
    sets = [f" --set parallel.{k}=1" for k in ("dp_replicate", "dp_shard", "tp", "pp") if getattr(cfg.parallel, k) > 1]
    return f"`stride repro --nproc 1{''.join(sets)}` re-runs it in one process"


def _launch(cfg_path: Path, overrides: list[str], rerun: Path, nproc: int, advice: str) -> None:
    """Train `cfg_path` into `rerun` on `nproc` processes through `stride train --nproc` (torchrun, the layout
    check and the run folder's lock, as on the command line)."""
    from stride.launch.torchrun import run_torchrun

    sets = [a for o in [*overrides, "metrics.progress=false"] for a in ("--set", o)]
    cmd = [sys.executable, "-m", "stride", "train", str(cfg_path), *sets, "--out", str(rerun), "--nproc", str(nproc)]
    with _stdout_to_stderr():
        code = run_torchrun(cmd, dict(os.environ))
    if code != 0:
        err = ReproError(f"the re-run into {rerun} on {nproc} processes (`stride train ... --nproc {nproc}`) failed "
                         f"with exit code {code} (its messages are above); {advice}")
        err.exit_code = 2 if code == 2 else 1  # the child refused its input: bad input here too, not a mismatch
        raise err


def default_rerun_dir(run_dir: Path) -> Path:
    base = run_dir.parent / f"{run_dir.name}-repro"
    path, i = base, 1
    while path.exists():
        path, i = run_dir.parent / f"{run_dir.name}-repro-{i}", i + 1
    return path


RUN_FILE_MAX_BYTES = 64 << 20  # summary.json, env.json, config.toml: KiBs


class RunFolderError(StrideError):
    """A file of the recorded run that is not what `stride train` writes: one line naming it (exit status 2)."""

    exit_code = 2


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
        return json_object(text, path)
    except InputFileError as exc:
        raise RunFolderError(f"{exc}; the run may not have finished") from None


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
        if not finite_number(loss):
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


class EditedConfigError(RunFolderError):
    """config.toml no longer hashes to the config_hash the run recorded: it was edited after the run, and re-running
    it would not re-run the recorded run (exit status 2, nothing re-run)."""


def recorded_config(run_dir: Path, cfg: RunConfig, recorded_hash: str) -> tuple[dict[str, Any], str] | None:
    """The resolved config the run recorded and where, where it kept one whose content hashes to summary.json's
    `config_hash` (so an edited or older copy is not taken for it): the copy of config.toml the run folder keeps
    (stride.metrics.run_dir.RECORDED_CONFIG, written with config.toml), else a checkpoint's meta.json (`config`).
    None: neither (a run written before the copy was kept, and without checkpoints)."""
    from stride.checkpoint.safe_read import META
    from stride.config import config_to_dict
    from stride.metrics.run_dir import RECORDED_CONFIG

    copy_path = run_dir / RECORDED_CONFIG
    if os.path.lexists(copy_path):
        with contextlib.suppress(ConfigError):  # not a regular file, not TOML, not a valid config: not the record
            kept = load_config(copy_path)
            if config_hash(kept) == recorded_hash:
                return config_to_dict(kept), RECORDED_CONFIG
    roots = []
    for d in dict.fromkeys((cfg.checkpoint.dir, "checkpoints")):
        root = Path(d) if Path(d).is_absolute() else run_dir / d
        if root.is_dir():
            roots.append(root)
    for root in roots:
        with contextlib.suppress(OSError):
            for meta in sorted(root.glob(f"step_*/{META}"), reverse=True):
                # RecursionError: a meta.json nested thousands deep is no record either (it was a traceback)
                with contextlib.suppress(RunFolderError, InputFileError, ValueError, OSError, RecursionError):
                    text = _read_run_file(meta, "checkpoint meta")
                    table = json.loads(text) if text is not None else None
                    conf = table.get("config") if isinstance(table, dict) else None
                    if isinstance(conf, dict) and table_hash(conf) == recorded_hash:
                        return conf, "its checkpoint's meta.json"
    return None


def config_changes(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`section.key recorded -> now` for every value that differs (a key one side lacks: `<absent>`)."""
    now = json.loads(json.dumps(now))  # tuples as lists, as the recorded JSON holds them
    out = []
    for sec in sorted(set(recorded) | set(now)):
        a, b = recorded.get(sec), now.get(sec)
        if not (isinstance(a, dict) and isinstance(b, dict)):
            if a != b:
                out.append(f"{sec} {_shown(a) if sec in recorded else '<absent>'} -> "
                           f"{_shown(b) if sec in now else '<absent>'}")
            continue
        for key in sorted(set(a) | set(b)):
            va, vb = a.get(key, "<absent>"), b.get(key, "<absent>")
            if va != vb:
                out.append(f"{sec}.{key} {_shown(va) if key in a else '<absent>'} -> "
                           f"{_shown(vb) if key in b else '<absent>'}")
    return out


def edited_config_message(run_dir: Path, cfg: RunConfig, summary: dict[str, Any], env: dict[str, Any]) -> str:
    """Why a config.toml that does not hash to the recorded config_hash is refused: the keys that differ from the
    resolved config the run recorded (`recorded_config`: the run folder's copy or a checkpoint's meta.json), or,
    where the run kept none, that the file was edited after the run; and how to re-run a change on purpose."""
    from stride.config import config_to_dict
    from stride.metrics.run_dir import RECORDED_CONFIG

    cfg_path = run_dir / "config.toml"
    found = recorded_config(run_dir, cfg, summary["config_hash"])
    recorded, where = found if found is not None else (None, "")
    how = ("; to re-run a changed value on purpose, restore config.toml and pass the change with --set KEY=VALUE, "
           "or pass --allow-edited-config to re-run config.toml as it is now")
    if recorded is not None:
        changes = config_changes(recorded, config_to_dict(cfg))
        if changes:
            sets = " ".join(f"--set {c.split(' ', 1)[0]}={c.rsplit(' -> ', 1)[1]}" for c in changes[:4])
            return (f"{cfg_path} was edited after the run: it differs from the config the run recorded ({where}, "
                    f"config_hash {summary['config_hash']}) in {'; '.join(changes)}; "
                    f"nothing was re-run (stride repro re-runs the recorded run){how} (e.g. {sets})")
    commit_then = env.get("git_commit")
    from stride.metrics.env import git_output

    repo = Path(__file__).resolve().parents[2]
    commit_now = git_output(["rev-parse", "HEAD"], repo)
    schema_diff = None  # whether stride/config changed between the recorded commit and this one ('' : not)
    if isinstance(commit_then, str) and commit_now and commit_then != commit_now:
        schema_diff = git_output(["diff", "--stat", commit_then, commit_now, "--", "stride/config"], repo)
    other_code = (f" (or was written by a stride whose config schema differs: recorded at commit "
                  f"{_shown(commit_then)}, this is {_shown(commit_now)})"
                  if isinstance(commit_then, str) and commit_now and commit_then != commit_now and schema_diff != ""
                  else "")
    kept = (f"the run kept no copy of its resolved config ({RECORDED_CONFIG}, a checkpoint's meta.json) that hashes "
            "to it, to name the keys that differ")
    if recorded is not None:  # the same values, another hash: not an edit of a value
        kept = f"its values are those the run recorded ({where}), so the schema or its writing differs"
    return (f"{cfg_path} no longer hashes to the config_hash the run recorded ({summary['config_hash']}): it was "
            f"edited after the run{other_code}; {kept}; nothing was re-run (stride repro re-runs the recorded run)"
            + how)


def check_run_files(run_dir: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Before anything is re-run: summary.json, env.json and config.toml are regular files (a RunFolderError naming
    one that is a FIFO, a device, a directory, ...), the JSON ones objects, and the summary fields repro reads what
    `stride train` writes (`summary_problem`). Returns the summary and the environment as read here (`reproduce`
    compares these, not a second read); what is missing is None, left to `reproduce`, which says so."""
    config = _read_run_file(run_dir / "config.toml", "run config")
    steps = None
    if config is not None:
        with contextlib.suppress(ValueError, RecursionError, AttributeError):  # load_config names what is wrong
            steps = tomllib.loads(config).get("train", {}).get("steps")
    summary = _json_object(run_dir / "summary.json", "run summary")
    env = _json_object(run_dir / "env.json", "run environment file")
    if summary is not None and (why := summary_problem(summary, steps if type(steps) is int else None)):
        raise RunFolderError(f"{run_dir / 'summary.json'}: {why}: edited or damaged; nothing was re-run")
    return summary, env


def reproduce(run_dir: str | Path, out: str | Path | None = None, tolerance: float = 1e-5,
              overrides: list[str] | None = None, nproc: int | None = None,
              allow_edited_config: bool = False) -> ReproReport:
    """Re-run `run_dir`'s recorded config into `out` (default `<run_dir>-repro`) on `nproc` processes (default:
    the recorded world size) and compare. A config.toml edited after the run (it no longer hashes to the recorded
    config_hash) is an EditedConfigError naming what changed, nothing re-run, unless `allow_edited_config`."""
    from stride.train.trainer import Trainer

    checked_summary, checked_env = check_run_files(Path(run_dir))
    if nproc is not None and nproc < 1:
        raise ConfigError(f"--nproc {nproc} must be >= 1")
    run_dir = Path(run_dir)
    if run_dir.is_file():
        raise ConfigError(f"{run_dir}: a file; give the run directory that holds it ({run_dir.parent})"
                          if run_dir.name in ("summary.json", "config.toml", "env.json")
                          else f"{run_dir}: a file, not a run directory (config.toml, env.json, summary.json)")
    if (run_dir / "results.json").is_file() and not (run_dir / "summary.json").is_file():
        runs = sorted(p.parent.name for p in run_dir.glob("*/summary.json"))
        raise ConfigError(f"{run_dir}: a `stride bench` directory; re-run one of its runs"
                          + (f", e.g. `stride repro {run_dir / runs[0]}` ({', '.join(runs)})" if runs else ""))
    # read once, by check_run_files; _read_json only says what is missing
    summary = checked_summary if checked_summary is not None else _read_json(run_dir / "summary.json")
    env = checked_env if checked_env is not None else _read_json(run_dir / "env.json")
    cfg_path = run_dir / "config.toml"
    if not cfg_path.is_file():
        raise ConfigError(f"{cfg_path} not found: is {run_dir} a stride run directory?")
    for key in ("params_sha256", "config_hash", "final_train_loss"):
        if key not in summary:
            raise ConfigError(f"{run_dir / 'summary.json'} has no `{key}`: recorded by an older stride?")
    from_caller = [w for k, w in (("model", "a model"), ("data", "data"), ("loss", "a loss"))
                   if (summary.get("inputs_from") or {}).get(k) == "caller"]
    if from_caller:
        raise ConfigError(f"{run_dir} trained on {' and '.join(from_caller)} passed to Trainer(...) in Python, which "
                          "config.toml does not describe: stride repro re-runs only runs whose config builds them; "
                          "re-run the script that made it")
    # The file as it is, without --set: the overrides are changes asked for on purpose; the file is what the run
    # recorded, unless it was edited after the run (hashed before the rerun's own display setting below, which is
    # part of the hash: a run recorded with its progress bar on was reported as a config mismatch).
    file_cfg = load_config(cfg_path)
    hash_match = config_hash(file_cfg) == summary["config_hash"]
    if not hash_match and not allow_edited_config:
        raise EditedConfigError(edited_config_message(run_dir, file_cfg, summary, env))
    cfg = load_config(cfg_path, overrides) if overrides else file_cfg
    cfg.metrics.progress = False
    rerun = Path(out) if out is not None else default_rerun_dir(run_dir)
    recorded_world = summary.get("world_size")
    if recorded_world is not None and (isinstance(recorded_world, bool) or not isinstance(recorded_world, int)
                                       or recorded_world < 1):
        raise ConfigError(f"{run_dir / 'summary.json'}: `world_size` = {recorded_world!r} is not a process count "
                          "(an integer >= 1): edited or damaged")
    world = nproc or (recorded_world if isinstance(recorded_world, int) and recorded_world > 0 else 1)
    # An extended run (docs/checkpoint.md): replay each earlier segment to its own train.steps first, as the
    # original was trained (the learning-rate schedule of each segment ran over that segment's step count).
    segments = [int(s) for s in (summary.get("checkpoint") or {}).get("extended_from") or []]
    if world > 1:  # a layout that does not fit this count is a one-line config error (exit 2) before any launch
        from stride.launch.preflight import check_before_launch

        check_before_launch(cfg, world)
    for steps in [*segments, None]:
        if world > 1:
            _launch(cfg_path, [*(overrides or []), *([f"train.steps={steps}"] if steps is not None else [])],
                    rerun, world, one_process_advice(cfg))
            continue
        segment = copy.deepcopy(cfg)
        if steps is not None:
            segment.train.steps = steps
        Trainer(config=segment, out=rerun).fit()
    new_summary, new_env = _read_json(rerun / "summary.json"), _read_json(rerun / "env.json")
    changes, note = layout_history(summary)
    lo, ln = float(summary["final_train_loss"]), float(new_summary["final_train_loss"])
    return ReproReport(
        original=run_dir, rerun=rerun, deterministic=bool(cfg.train.deterministic),
        params_match=new_summary["params_sha256"] == summary["params_sha256"],
        loss_original=lo, loss_rerun=ln, loss_rel_diff=_rel_diff(lo, ln), tolerance=tolerance,
        config_hash_match=hash_match, env_diff=env_diff(env, new_env),
        world_size_original=recorded_world if isinstance(recorded_world, int) else None,
        world_size_rerun=int(new_summary.get("world_size") or world),
        parallel_original=summary.get("parallel"), parallel_rerun=new_summary.get("parallel"),
        layout_changes=changes, layout_note=note,
    )
