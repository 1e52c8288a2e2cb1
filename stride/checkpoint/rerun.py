"""A run started on a folder that already holds one: continue it, extend it, say it is finished, or refuse.

Rerunning the command of a finished run used to "resume" at its last step, train nothing and write a
summary of nothing over the real one (loss NaN, no throughput). A refused resume wrote its config first.
The rules (docs/checkpoint.md, "Rerunning a run"):

- An earlier run in the folder (summary.json or metrics.jsonl) that checkpoints will not continue
  (`checkpoint.enabled = false` or `resume = never`) is refused, unless `--overwrite` (Trainer(overwrite=True))
  removes its files first: `open_run_folder`, before anything is written.
- With checkpoints, the newest valid one decides (`decide`), before it is loaded and before the run
  folder is written: the run is finished (at its last step, or stopped at its target: summary.json says
  so): nothing is trained and no file changes (`RunFinished`); `train.steps` grew past a finished run's
  end: the run is extended from its last checkpoint to the new count; anything else that changed
  `train.steps` (shortening, or changing it before the run finished) is refused.
- A run finished at its last checkpoint without summary.json (its process was stopped between the final save's
  commit and the summary's write): the final checkpoint's meta.json records the summary as it stood then
  (`recorded_summary`), and the rerun writes it, trains nothing and says so in one line. Before, the rerun called
  the run finished and no summary.json was ever written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stride.checkpoint.errors import ConfigMismatchError, LastCheckpointUnusableError
from stride.config.errors import ConfigError
from stride.config.schema import RunConfig
from stride.files.step_names import holds_steps, step_name
from stride.metrics.run_dir import RUN_FILES, RunDir, json_text

SUMMARY_KEY = "summary"  # meta.json of a run's final checkpoint: summary.json as it stood at the save
# in that record: the keys the callbacks after the checkpoint's add at their end (`system`, the sinks' run ids), which
# the record holds as those callbacks had them at the save (Callback.summary_keys); only a recovered summary has it
LATER_KEYS = "recorded_at_final_save"


class RunFinished(Exception):  # noqa: N818 (not an error: fit() returns the finished run's summary)
    """Raised in a callback's on_fit_start: the folder holds this run, finished. `fit()` trains nothing, writes
    nothing, and returns the stored summary."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


class RunExistsError(ConfigError):
    """The run folder holds an earlier run that this one would overwrite (exit status 2, one line). A ConfigError, as
    a rank of `stride train --nproc` reports a refusal (not a crash), but not the config's fault: no "config error"
    label, as the other folder refusals."""

    label = ""


@dataclass
class Verdict:
    kind: str  # "resume" | "extend" | "finished"
    ended_at: int | None = None  # the step the earlier run ended at (finished or extended)
    extended_from: list[int] = field(default_factory=list)  # train.steps of every segment before this one
    # finished: why its last step has no checkpoint that passed verification (None: the newest valid one is of its
    # last step), so raising train.steps cannot extend it (`finished_message`)
    last_unusable: str | None = None


def earlier_run(path: Path) -> dict[str, Any] | None:
    """What an earlier run left in `path`: {"steps": int | None (summary.json's), "finished": bool}, or None."""
    summary = read_summary(path)
    if summary is not None:
        # a `stride profile` folder: its traces and analysis beside the summary (its step count includes the
        # profiler's wait, warm-up and closing steps, so the message names what the folder is)
        profile = (path / "analysis.json").is_file() and (path / "traces").is_dir()
        return {"steps": summary.get("steps"), "finished": True, "profile": profile}
    if (path / "metrics.jsonl").is_file() and (path / "metrics.jsonl").stat().st_size > 0:
        return {"steps": None, "finished": False}
    return None


def read_summary(path: Path) -> dict[str, Any] | None:
    """summary.json of the run in `path` (None if there is none; an unreadable one counts as present)."""
    f = path / "summary.json"
    if not f.is_file():
        return None
    try:
        out = json.loads(f.read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def _checkpoint_root(cfg: RunConfig, run: Path) -> Path:
    d = Path(cfg.checkpoint.dir)
    return d if d.is_absolute() else run / d


def open_run_folder(cfg: RunConfig, out: str | Path | None, overwrite: bool) -> RunDir:
    """Rank 0's run folder, locked, with nothing written yet; an earlier run in it is refused or (`overwrite`) removed.

    With checkpoints continuing the earlier run (`enabled`, `resume = auto`) the checkpoint callback
    decides later (`decide`); here only what no checkpoint can continue is refused. A folder holding a bench's or
    a sweep's results is refused before anything is made (`stride profile`, `stride repro` and Python callers too)."""
    if out is not None:
        from stride.files.folder_kind import refuse_others

        refuse_others(out, "train")
    run = RunDir.create(cfg.metrics.out_dir, cfg.train.name, out)
    try:
        found = earlier_run(run.path)
        ckpt_root = _checkpoint_root(cfg, run.path)
        if overwrite:
            outside = ckpt_root if Path(cfg.checkpoint.dir).is_absolute() else None
            if outside is not None and cfg.checkpoint.enabled and holds_steps(outside):
                raise RunExistsError(f"--overwrite starts {run.path} over, but checkpoint.dir {outside} (outside the "
                                     "run folder) holds checkpoints a new run would resume from; move them away")
            run.clear(RUN_FILES + ((cfg.checkpoint.dir,) if outside is None else ()))
        elif found is not None and not (cfg.checkpoint.enabled and cfg.checkpoint.resume == "auto"):
            raise RunExistsError(f"{run.path} holds {describe(found)}{_why_not(cfg)}: a new run would overwrite it; "
                                 "use another --out, or --overwrite to replace it")
    except BaseException:
        run.close()
        raise
    return run


def describe(found: dict[str, Any]) -> str:
    if found["finished"]:
        steps = found.get("steps")
        what = "a finished `stride profile` run (summary.json, traces/" if found.get("profile") else \
            "a finished run (summary.json"
        counted = " trained, with the profiler's wait, warm-up and closing steps" if found.get("profile") else ""
        return f"{what}{f', {steps} steps{counted}' if steps is not None else ''})"
    return "an earlier run's metrics.jsonl (a run that did not finish)"


def _why_not(cfg: RunConfig) -> str:
    if not cfg.checkpoint.enabled:
        # the checkpoints of THIS command's config: the folder may hold some, which it would not resume from
        return " and this command runs with checkpoint.enabled = false, so it would not continue it"
    return " and checkpoint.resume = never"


def decide(step: int, meta: dict[str, Any], summary_steps: int | None, steps: int, folder: Path,
           skipped: list[str] | None = None) -> Verdict:
    """What to do with the newest valid checkpoint `step` (its `meta`) when the run asks for `steps`.

    `summary_steps`: the steps in the run folder's summary.json (the run ended there), None without one;
    `skipped`: the newer checkpoints passed over and why ("step_00000030: <reason>"), for the message.
    Raises ConfigMismatchError for a change of `train.steps` that cannot continue the run exactly."""
    saved = int((meta.get("config") or {}).get("train", {}).get("steps", steps))
    history = [int(s) for s in meta.get("extended_from") or []]
    ended = summary_steps if summary_steps is not None and summary_steps >= step else None
    if ended is None and step >= saved:
        ended = step  # saved at its last step; the summary was not written (stopped while finishing)
    if steps == saved:
        if ended is None:
            return Verdict("resume", None, history)
        # summary.json says it ended after the newest valid checkpoint: the one of its last step failed the
        # verifier (skipped, with the reason) or was never saved, so an extension would be refused (below)
        last = _why_no_last(meta, skipped, ended, _skipped_at(skipped, ended)) if ended != step else None
        return Verdict("finished", ended, history, last)
    where = f"the run whose newest valid checkpoint is {folder}"
    if ended is None:
        raise ConfigMismatchError(
            f"train.steps changed from {saved} to {steps}, but {where} stopped at step {step} of {saved}: "
            f"finish it first (train.steps = {saved}), then raise train.steps to extend it")
    if ended != step:
        at_end = _skipped_at(skipped, ended)
        raise (LastCheckpointUnusableError if at_end else ConfigMismatchError)(
            f"{where} ended at step {ended}, after that checkpoint ({_why_no_last(meta, skipped, ended, at_end)}): "
            "it cannot be extended exactly; use another --out")
    if steps < ended:
        raise ConfigMismatchError(
            f"train.steps = {steps} is below the {ended} steps {where} already trained: a finished run is not "
            "shortened; use another --out")
    if steps == ended:
        return Verdict("finished", ended, history)
    return Verdict("extend", ended, [*history, saved])


def _skipped_at(skipped: list[str] | None, ended: int) -> str | None:
    """The skipped entry ("step_00000024: <reason>") of the run's last step, None if that one was not skipped."""
    return next((s for s in skipped or [] if s.startswith(f"{step_name(ended)}:")), None)


def _why_no_last(meta: dict[str, Any], skipped: list[str] | None, ended: int, at_end: str | None) -> str:
    """Why the run's last step has no usable checkpoint: the one of that step was skipped (named, with the reason:
    a valid copy put back would extend the run), the run did not save one at its end, or none is there. Newer
    checkpoints skipped short of the end are named too (restoring them would not help). `at_end`: _skipped_at's."""
    skipped = skipped or []
    if at_end:
        return f"{at_end} was skipped; put back a valid {step_name(ended)} to extend the run"
    if (meta.get("config") or {}).get("checkpoint", {}).get("save_at_end") is False:
        why = "checkpoint.save_at_end = false"
    else:
        why = "no checkpoint of its last step is in the folder"
    return why + ("; newer ones were skipped too: " + "; ".join(skipped) if skipped else "")


def finished_message(run: Path | None, ended: int, steps: int, has_summary: bool,
                     last_unusable: str | None = None) -> str:
    """What a rerun of a finished run says. `last_unusable` (Verdict.last_unusable): why no verified checkpoint of its
    last step is there; the advice to raise train.steps is then not given, as the extension would be refused (its
    checkpoint of step 290 failed its checksum, and the message still said "it continues from step 290")."""
    where = str(run) if run is not None else "the checkpoint folder"
    tail = "" if has_summary else " (it has no summary.json: it stopped while writing it)"
    if not has_summary and run is not None and not (run / "metrics.jsonl").is_file():
        tail = " (a checkpoint at its last step with no run beside it, as `stride sweep --export` writes one)"
    stopped = "" if ended == steps else f" (it stopped at step {ended}: the target was reached)"
    further = (f"To train it further raise train.steps (it continues from step {ended})" if last_unusable is None else
               f"It cannot be trained further from here: no valid checkpoint of step {ended} ({last_unusable})")
    return (f"{where} holds this run, finished at step {ended}{stopped}{tail}: nothing trained, no file changed. "
            f"{further}; to start over use another --out, or --overwrite")


def recorded_text(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` as summary.json would hold it (strict JSON: a non-finite number null and named in
    `nonfinite_fields`), for the final checkpoint's meta.json."""
    out = json.loads(json_text(summary))
    return out if isinstance(out, dict) else {}


def recorded_summary(meta: dict[str, Any], folder: Path) -> dict[str, Any] | None:
    """The summary the final checkpoint in `folder` recorded (its `meta`), as a rerun writes it into a run folder that
    has none, with `summary_note` saying where it came from and what it lacks; None: no summary recorded (a
    checkpoint of an older stride, or not a run's final one)."""
    rec = meta.get(SUMMARY_KEY)
    if not isinstance(rec, dict) or not rec or rec.get("steps") != meta.get("step"):
        return None
    later = rec.get(LATER_KEYS)
    if isinstance(later, list) and later:
        what = (f"; the keys of the callbacks after the checkpoint ({', '.join(map(str, later))}) are as those "
                "callbacks had them at the save" + (" (`system`: the samples taken until then; system.jsonl holds the "
                                                    "later ones)" if "system" in later else ""))
    elif isinstance(later, list):  # no callback after the checkpoint adds a key
        what = ""
    else:  # recorded by a stride before Callback.summary_keys
        what = ("; what the callbacks after the checkpoint add at the end is missing: `system` (system.jsonl holds its "
                "samples) and the sinks' keys (tensorboard_dir, mlflow_run_id, wandb_run_id)")
    return {**rec, "summary_note": (
        f"written by a rerun from {folder.name}/meta.json: the process that trained the run was stopped after its "
        "final checkpoint and before writing summary.json. Every figure is that process's, as it computed them "
        "before the final save; checkpoint_count and checkpoint.saved_steps include the final save, but "
        "checkpoint_stall_s, checkpoint.stall_s, stall_parts_s and save_s lack its time" + what)}


def recovered_message(run: Path, ended: int, steps: int, folder: Path) -> str:
    """The one line of a rerun that wrote a finished run's missing summary.json (`recorded_summary`)."""
    stopped = "" if ended == steps else f" (it stopped at step {ended}: the target was reached)"
    return (f"{run} holds this run, finished at step {ended}{stopped}, without summary.json (its process was stopped "
            "after the "
            f"final checkpoint and before writing it): wrote summary.json from {folder.name}/meta.json's record of "
            "it; nothing trained, no other file changed")
