"""CheckpointCallback: auto-resume, periodic (async) saves, rollback on repeated faults, preemption.

Wired into the Trainer when `[checkpoint] enabled = true`. It loads state in `on_fit_start` (after
setup, before the first step, and before the run folder is written: a run found finished, or a resume
refused, changes no file: stride.checkpoint.rerun), saves every `every` steps in `on_step_end`, and at the end; a
SIGTERM/SIGUSR1 makes the next step end save and exit 0. With several ranks a signal reaches them at
different moments, so the ranks agree on the step first (each rank's flag rides on the step guard's
all-reduce): all save the same step and exit 0. Every pause it causes is added to the step breakdown
as "checkpoint" and summed in summary.json.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from stride.checkpoint import train_state
from stride.checkpoint.config_diff import config_diff
from stride.checkpoint.errors import (
    CheckpointError,
    CheckpointLoadError,
    ConfigMismatchError,
    ModelMismatchError,
    SaveVetoed,
    StoreChangedError,
)
from stride.checkpoint.guard import StepGuard
from stride.checkpoint.rerun import (
    LATER_KEYS,
    SUMMARY_KEY,
    RunExistsError,
    RunFinished,
    Verdict,
    decide,
    finished_message,
    read_summary,
    recorded_summary,
    recorded_text,
    recovered_message,
)
from stride.checkpoint.signals import REPEAT_WINDOW_S, Preempted, PreemptionSignal
from stride.checkpoint.store import CheckpointStore, Choice
from stride.config import config_hash, config_to_dict
from stride.errors import one_line
from stride.metrics.env import available_cores
from stride.models.registry import checkpoint_model_hint
from stride.parallel.ranks import rank_and_world
from stride.parallel.watchdog import collective
from stride.train.callbacks import Callback, TrainerView


def _log(msg: str) -> None:
    # one write per line: print() writes the text and its newline apart, and the lines of two ranks
    # sharing a stderr then interleave ("...resume)stride checkpoint: ..." on one line)
    sys.stderr.write(f"stride checkpoint: {msg}\n")
    sys.stderr.flush()


class CheckpointCallback(Callback):
    """See the module docstring. `root` overrides where checkpoints live (default: run dir / checkpoint.dir)."""

    guards_nonfinite = True  # the step guard skips non-finite steps and rolls back (stride.checkpoint.guard)

    def __init__(self, root: str | Path | None = None, log=_log) -> None:
        self.root_override = Path(root) if root is not None else None
        self.log = log
        self.store: CheckpointStore | None = None
        self.guard: StepGuard | None = None
        self.signal = PreemptionSignal()
        self.stall_s = 0.0
        self.stall_parts: dict[str, float] = {}  # what the stalls were made of, summed over saves
        self._meta_cache: dict[str, Any] | None = None
        self.staging = "loop"  # where async saves copy the state ("loop" | "background"), in on_fit_start
        self._trainer: TrainerView | None = None
        self.resumed: Choice | None = None
        self.verdict = Verdict("resume")  # what the rerun rules said about the checkpoint resumed (rerun.decide)
        self.resume_changes: list[str] = []  # allowed config differences from the checkpoint resumed
        self.rollbacks = 0
        self.rollback_events: list[dict[str, Any]] = []  # from_step, to_step, reason of each rollback of this process
        self.last_saved: int | None = None
        self._store: dict[str, Any] | None = None  # the data store's path and sha256s (train_state.store_identity)

    # -- helpers -------------------------------------------------------------------------------
    def _notice(self, msg: str) -> None:
        """Log what every rank would say alike (the resume, the staging choice) once: on rank 0.

        What a rank says of itself (its RNG and data state, its loss, a signal it received) stays `log`."""
        if rank_and_world()[0] == 0:
            self.log(msg)

    def _root(self, trainer: TrainerView) -> Path:
        if self.root_override is not None:
            return self.root_override
        d = Path(trainer.cfg.checkpoint.dir)
        if d.is_absolute():
            return d
        run_path = str(trainer.run_dir.path) if trainer.run_dir is not None else None
        if rank_and_world()[1] > 1:  # only rank 0 creates the run directory: take its path
            box = [run_path]
            with collective("checkpoint run-directory broadcast"):
                dist.broadcast_object_list(box, src=0)
            run_path = box[0]
        if run_path is None:
            raise CheckpointError(f"`checkpoint.dir` = {str(d)!r} is relative but the run writes no run directory; "
                                  "give an absolute `checkpoint.dir` or enable the run directory")
        return Path(run_path) / d

    def _meta(self, trainer: TrainerView) -> dict[str, Any]:
        if self._meta_cache is None:  # the config does not change during a run: build it once
            self._meta_cache = {"config": config_to_dict(trainer.cfg), "config_hash": config_hash(trainer.cfg),
                                "world_size": rank_and_world()[1], "extended_from": list(self.verdict.extended_from)}
            n, batch = train_state.data_shape(trainer.data_position())
            if n is not None and batch is not None:  # the config does not cover a store's content (audit 16, M1)
                self._meta_cache["data"] = {"n_windows": n, "batch_size": batch}
            if self._store is not None:  # ... nor does the window count cover it: the store's files' sha256 (a key
                self._meta_cache["data_store"] = self._store  # of its own: an older stride's check of `data` passes)
        return self._meta_cache

    def save(self, trainer: TrainerView, *, final: bool = False, summary: dict[str, Any] | None = None) -> float:
        """Checkpoint the trainer's current step; returns (and books) the stall in seconds. `summary`: the run's
        summary.json as it stands at the final save, recorded in meta.json (a rerun writes it if the process is
        stopped before it writes summary.json: stride.checkpoint.rerun.recorded_summary)."""
        assert self.store is not None and self.guard is not None
        if trainer.run_dir is not None:
            trainer.run_dir.flush()  # every step this checkpoint holds is in metrics.jsonl before it exists
        asynchronous = trainer.cfg.checkpoint.async_save and not final
        t0 = time.perf_counter()
        state = train_state.capture(trainer, self.guard.state_dict())
        meta = self._meta(trainer) if summary is None else {**self._meta(trainer), SUMMARY_KEY: summary}
        capture_s = time.perf_counter() - t0
        try:
            self.store.save(state, trainer.step, meta, asynchronous=asynchronous,
                            stage_in_background=asynchronous and self.staging == "background",
                            check=lambda: trainer.data_changed_in_place() or [])
        except SaveVetoed as veto:
            raise self._changed_data(trainer, veto.views) from None
        if final:
            self.store.wait()
        stall = time.perf_counter() - t0
        for k, v in {"capture_s": capture_s, **self.store.last_stall_parts}.items():
            self.stall_parts[k] = self.stall_parts.get(k, 0.0) + v
        self.stall_s += stall
        self.last_saved = trainer.step
        return stall

    def _changed_data(self, trainer: TrainerView, views: list[list[str]]) -> StoreChangedError:
        """No checkpoint of batches read from a store file changed in place (written with its size kept: no fault,
        other bytes from then on; audit 16): a resume from it would continue a run on data that is neither the old
        store nor the new one. Every rank's check is gathered as the save's first barrier, so all refuse alike."""
        where = "; ".join(n if len(views) == 1 else f"on rank {r}: {n}" for r, notes in enumerate(views) for n in notes)
        last = f"checkpoint step {self.last_saved}" if self.last_saved is not None else "the start"
        return StoreChangedError(
            f"not saving step {trainer.step}: {where} while this run read it, so its batches since may mix the store's "
            "old and new bytes. A store must not be modified in place (stride data ingest writes a new one); restore "
            f"it and run the same command to resume from {last}")

    def _load(self, trainer: TrainerView, choice: Choice) -> None:
        assert self.store is not None and self.guard is not None and choice.folder is not None
        self.store.wait()
        try:
            loaded = self.store.load(choice.folder, lambda keys: train_state.load_template(trainer, keys))
        except ModelMismatchError as exc:  # every older checkpoint holds the same model: refused, not fallen back from
            raise ModelMismatchError(
                f"checkpoint {choice.folder.parent / str(exc)}; {checkpoint_model_hint(trainer.cfg.model, exc.saved)}."
                " Refusing to resume: DCP loads only what this model asks for; resume with the model the checkpoint "
                "was saved from, or use another --out", exc.saved) from None
        # Each rank checks its own sections; the ranks exchange the verdicts and data positions, so a rank's own
        # part may be the bad one and still every rank decides alike (falls back together, or refuses together).
        mine = (train_state.problem(trainer, loaded, choice.step), train_state.position_of(loaded))
        views = self.store.gather(mine, "checkpoint training-state check")
        positions = [p for _, p in views]
        if changed := train_state.data_changed(trainer, positions, choice.meta or {}, str(choice.folder)):
            raise ConfigMismatchError(changed)
        why = next((w for w, _ in views if w is not None), None) \
            or train_state.ranks_disagree(trainer, positions, choice.step, choice.meta or {})
        if why is not None:
            raise CheckpointLoadError(f"{choice.folder.name}: {why}")
        try:
            guard_state, notes = train_state.apply(trainer, loaded)
            self.guard.load_state_dict(guard_state)
            failed = None
        except Exception as exc:  # a rank-local failure took the whole job down with a traceback (audit 16, M1)
            failed, notes = one_line(f"{type(exc).__name__}: {exc}"), []
        errors = self.store.gather(failed, "checkpoint training-state apply outcome")
        if bad := [(r, e) for r, e in enumerate(errors) if e is not None]:
            raise CheckpointLoadError(f"{choice.folder.name}: its training state could not be applied ("
                                      + "; ".join(f"on rank {r}: {e}" for r, e in bad) + ")")
        for note in notes:
            self.log(note)

    def _check_config(self, trainer: TrainerView, choice: Choice) -> list[str]:
        """Refuse a checkpoint of another experiment (unless forced); returns the allowed differences.

        Layout and execution keys (stride.checkpoint.config_diff.ALLOWED, e.g. `parallel.dp_shard`,
        `parallel.pp`) may differ: DCP reshards the state. The world size is reported with them.
        """
        meta = choice.meta or {}
        diff = config_diff(meta.get("config", {}), config_to_dict(trainer.cfg))
        allowed = list(diff.allowed)
        # the ranks that wrote it, from its .metadata: a meta.json that says otherwise is refused (audit 16, L3)
        saved_world, world = choice.world_size or meta.get("world_size"), rank_and_world()[1]
        if saved_world is not None and saved_world != world:
            allowed.insert(0, f"world size: {saved_world} (checkpoint) -> {world} (now)")
        if not diff.refused:
            return allowed
        text = "\n  ".join(diff.refused)
        if trainer.cfg.checkpoint.force_resume:
            self._notice(f"{choice.folder} was written with another config (forced: resuming anyway):\n  {text}")
            return allowed
        also = ("\nthese differences alone would be allowed (layout and execution, not what is trained):\n  "
                + "\n  ".join(allowed)) if allowed else ""
        raise ConfigMismatchError(
            f"checkpoint {choice.folder} was written by a run with another config; refusing to resume "
            f"(set checkpoint.force_resume = true to load it anyway, or use another --out):\n  {text}{also}"
        )

    # -- hooks ---------------------------------------------------------------------------------
    def on_fit_start(self, trainer: TrainerView) -> None:
        c = trainer.cfg.checkpoint
        self.store = CheckpointStore(self._root(trainer), c.keep_last, c.keep_every, c.verify == "checksum", self.log)
        self.guard = StepGuard(c.nan_rollback_after, c.spike_threshold, c.spike_window, c.spike_action, self.log)
        self.guard.stop_request = lambda: self.signal.received or 0
        self._trainer = trainer
        self.guard.before_update = self._fence
        self._store = self._store_identity(trainer)
        self.staging = "loop"
        if c.async_save:
            self.staging, why = choose_staging(c.staging, trainer.device, _state_buffers(trainer.model))
            if why:
                self._notice(why)
        try:
            for note in self.store.prepare(fresh=c.resume == "never"):  # never: refuses a folder with checkpoints
                self.log(f"removed {note}")
            if c.resume == "auto":
                self._resume(trainer)
            if trainer.run_dir is not None:  # records past the step this run starts from: a killed segment's
                trainer.run_dir.drop_records_after(trainer.step)
        except BaseException:
            self.store.close(restore=True)  # a refused or finished run leaves the folder's lock file as it was
            raise
        if c.save_on_signal:
            self.signal.install()

    def _resume(self, trainer: TrainerView) -> None:
        """Load the newest valid checkpoint, after the rerun rules (stride.checkpoint.rerun) allowed it."""
        assert self.store is not None
        t0 = time.perf_counter()
        choice = self.store.newest_valid()
        summary = self._earlier_summary(trainer)
        ended = summary.get("steps") if summary is not None else None
        while choice.folder is not None:  # one that fails to load: the next older valid one (or an error)
            assert choice.step is not None
            self.resume_changes = self._check_config(trainer, choice)
            recorded = recorded_summary(choice.meta or {}, choice.folder) if summary is None else None
            # a final checkpoint records the summary: the run ended at its step (its last, or where it reached
            # train.target_val_loss), whether or not summary.json was written
            ended_at = ended if isinstance(ended, int) else choice.step if recorded is not None else None
            self.verdict = decide(choice.step, choice.meta or {}, ended_at, trainer.cfg.train.steps, choice.folder,
                                  choice.skipped)
            if self.verdict.kind == "finished":
                assert self.verdict.ended_at is not None
                run = trainer.run_dir.path if trainer.run_dir is not None else None
                if recorded is not None and trainer.run_dir is not None and run is not None \
                        and (run / "metrics.jsonl").is_file():
                    # stopped between the final checkpoint and summary.json: write the summary it recorded
                    trainer.run_dir.write_json("summary.json", recorded)
                    raise RunFinished(recovered_message(run, self.verdict.ended_at, trainer.cfg.train.steps,
                                                       choice.folder), recorded)
                raise RunFinished(finished_message(run, self.verdict.ended_at, trainer.cfg.train.steps,
                                                   summary is not None, self.verdict.last_unusable), summary or {})
            # meta.json's record of the data, before anything is loaded (the same on every rank)
            if changed := train_state.data_changed(trainer, [], choice.meta or {}, str(choice.folder)):
                raise ConfigMismatchError(changed)
            if changed := train_state.store_changed(self._store, choice.meta or {}, str(choice.folder)):
                if not trainer.cfg.checkpoint.force_resume:
                    raise ConfigMismatchError(changed)
                self._notice(changed.split(": the store was", 1)[0] + " (forced: continuing on this data)")
            try:
                self._load(trainer, choice)
                break
            except CheckpointLoadError as exc:
                choice = self.store.fall_back(choice, exc)
        if choice.folder is None:
            if summary is not None:
                raise RunExistsError(
                    f"{trainer.run_dir.path if trainer.run_dir else 'the run folder'} holds a finished run "
                    f"(summary.json) and no valid checkpoint to continue it from ({choice.describe()}): a new run "
                    "would overwrite it; use another --out, or --overwrite to replace it")
            if choice.damaged:
                # every checkpoint an earlier run committed failed verification: starting from step 0 would replace
                # that run's metrics.jsonl and, at its first saves, its checkpoints; a load that fails after
                # verification stops too (CheckpointFolder.fall_back). The user decides (audit 6: it trained 300
                # steps afresh). A folder no save committed (no manifest: a stray one, a save cut short) is no run.
                where = trainer.run_dir.path if trainer.run_dir else self.store.root
                raise RunExistsError(
                    f"{where} holds an earlier run's checkpoints and none is valid ({choice.describe()}): starting "
                    "from step 0 would replace that run; move the checkpoints away, use another --out, or "
                    "--overwrite to replace it")
            if choice.skipped:
                self._notice(f"{choice.describe()}: starting from step 0")
            return
        self.resumed = choice
        self.last_saved = trainer.step
        changed = ("; with another layout or execution settings (allowed: they do not change what is "
                   "trained; DCP reshards the state):\n  " + "\n  ".join(self.resume_changes)
                   if self.resume_changes else "")
        if self.verdict.kind == "extend":
            steps, lr = trainer.cfg.train.steps, float(trainer.optimizer.param_groups[0]["lr"])
            changed += (f"; extending the finished run from {self.verdict.ended_at} to train.steps = {steps} (the "
                        f"learning rate follows the {steps}-step schedule from here: lr {lr:.3g} at step "
                        f"{trainer.step + 1})")
        # the time apart from the last skip reason, which it read as part of (`... the manifest says 705193 in 0.03 s`)
        self._notice(f"{choice.describe()}; continuing at step {trainer.step} (found and loaded in "
                     f"{time.perf_counter() - t0:.2f} s)" + changed)

    def _store_identity(self, trainer: TrainerView) -> dict[str, Any] | None:
        """The data store's identity (train_state.store_identity), rank 0's on every rank: every rank then refuses or
        resumes alike, and meta.json records what rank 0 saw."""
        ident = train_state.store_identity(trainer.cfg.data)
        if rank_and_world()[1] > 1 and trainer.cfg.data.source == "store":
            box = [ident]
            with collective("checkpoint data-store identity broadcast"):
                dist.broadcast_object_list(box, src=0)
            ident = box[0]
        return ident

    def _earlier_summary(self, trainer: TrainerView) -> dict[str, Any] | None:
        """The run folder's summary.json (rank 0 reads it, every rank gets it), None without one."""
        summary = read_summary(trainer.run_dir.path) if trainer.run_dir is not None else None
        if rank_and_world()[1] > 1:
            box = [summary]
            with collective("checkpoint summary.json broadcast"):
                dist.broadcast_object_list(box, src=0)
            summary = box[0]
        return summary

    def before_optimizer_step(self, trainer: TrainerView, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> bool:
        """The step guard's verdict, the same on every rank: a non-finite loss or norm, or a spike, skips it."""
        assert self.guard is not None
        return self.guard.allow(trainer, loss, grad_norm)

    def _fence(self) -> None:
        """Before the optimizer step: wait for the previous save's background copy (booked as a stall)."""
        if self.store is None or not self.store.staging or self._trainer is None:
            return
        timer = self._trainer.timer
        timer.mark("optimizer")  # what ran before (clipping) stays in the optimizer phase
        waited = self.store.fence()
        timer.mark("checkpoint")
        self.stall_s += waited
        self.stall_parts["fence_wait_s"] = self.stall_parts.get("fence_wait_s", 0.0) + waited

    def on_step_end(self, trainer: TrainerView) -> None:
        assert self.store is not None and self.guard is not None
        c = trainer.cfg.checkpoint
        self.store.poll()
        if self.guard.rollback_reason is not None:
            self._rollback(trainer, self.guard.rollback_reason)
            return
        stop = self._agreed_stop(trainer)
        if stop and (last := _ends_here(trainer)):
            # The run ends here anyway: finish it (on_fit_end's final checkpoint, then summary.json) and exit 0. A
            # stop taken as at any other step saved and exited without summary.json: the rerun then found the run
            # finished at its last checkpoint and never wrote one, or (the target reached) trained on past the
            # step the run ended at (outside audit of checkpoints under faults).
            local = self.signal.received
            self._notice(f"{signal.Signals(local or stop).name} at step {trainer.step}, {last}"
                         f"{'' if local else ' (received by another rank)'}: finishing it (final checkpoint and "
                         "summary.json), then exiting")
            stop = 0
        if stop:
            local = self.signal.received
            name = signal.Signals(local or stop).name
            t0 = time.perf_counter()
            if self.last_saved != trainer.step:
                self.save(trainer, final=True)
            self.store.close()
            # The handler stays: a copy of the stop signal that comes in while the process exits (torchrun's
            # agent forwarding it late) is still absorbed; a stop signal after the window goes to the handler
            # that was there before, as it would after uninstall. The next run's install replaces it.
            copies = self.signal.repeats
            # Once, on rank 0: every rank saved the same step, and under torchrun the ranks share one stderr,
            # where a line per rank said the same thing N times.
            self._notice(f"{name} at step {trainer.step}{'' if local else ' (received by another rank)'}: checkpoint "
                     f"{self.store.folder(trainer.step).name} committed in {time.perf_counter() - t0:.2f} s; "
                     "exiting (run the same command to resume)"
                     + (f"; {copies} more stop signal(s) within {REPEAT_WINDOW_S:g} s of the first were taken as the "
                        "same request" if copies else ""))
            raise Preempted(0)
        if c.every and trainer.step % c.every == 0 and trainer.step < trainer.cfg.train.steps \
                and not _ends_here(trainer):  # a run that reaches its target here saves once, at its end, with the
            # summary in it (on_fit_end): a periodic save here left the final one out, and the summary unrecorded
            trainer.timer.add("checkpoint", self.save(trainer))
            if c.nan_rollback_after or c.spike_action == "rollback":
                trainer.keep_rollback_point()  # the loop's tallies here, for a rollback to this checkpoint

    def _agreed_stop(self, trainer: TrainerView) -> int:
        """The signal every rank stops on at the end of this step (0: none).

        One rank: its own flag. Several: what the step guard's vote said for this step; a signal that
        came after this step's vote is in the next one, so every rank stops after the same step. A
        loop that bypassed the step guard (no vote this step) pays one flag all-reduce of its own.
        """
        assert self.guard is not None
        if not trainer.cfg.checkpoint.save_on_signal:
            return 0
        local = self.signal.received or 0
        if rank_and_world()[1] == 1:
            return local
        vote = self.guard.stop_vote
        if vote is not None and vote[0] == trainer.step:
            return vote[1]
        flag = torch.tensor([float(local)], device=trainer.device)
        with collective("preemption vote (stop-flag all-reduce)"):
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def _rollback(self, trainer: TrainerView, reason: str) -> None:
        assert self.store is not None
        c = trainer.cfg.checkpoint
        self.store.wait()
        choice = self.store.newest_valid()
        if choice.folder is None:
            raise CheckpointError(f"{reason}, and there is no checkpoint to roll back to in {self.store.root}")
        if self.rollbacks >= c.max_rollbacks:
            raise CheckpointError(f"{reason}, after {self.rollbacks} rollbacks already (checkpoint.max_rollbacks): "
                                  "the fault repeats from the checkpoint; giving up")
        self.rollbacks += 1
        at = trainer.step
        self._load(trainer, choice)
        # the steps after the checkpoint are trained again: their first records leave metrics.jsonl (into
        # rollbacks.jsonl) and the summary's timings, so each step is counted and logged once (Trainer.rolled_back)
        event = {"rollback": self.rollbacks, "from_step": at, "to_step": trainer.step, "reason": reason}
        self.rollback_events.append(event)
        trainer.rolled_back(at, event)
        self.log(f"{reason}: rolled back from step {at} to {choice.folder.name} "
                 f"(rollback {self.rollbacks} of at most {c.max_rollbacks}); the records of steps "
                 f"{trainer.step + 1}-{at} moved from metrics.jsonl to rollbacks.jsonl")

    def on_fit_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        assert self.store is not None and self.guard is not None
        if trainer.cfg.checkpoint.save_at_end and self.last_saved != trainer.step:
            # the summary as it stands goes into the final checkpoint: a process stopped between the checkpoint's
            # commit and summary.json's write leaves a run whose rerun writes summary.json from it (rerun.py)
            record = dict(summary)
            self._add_section(trainer, record, [*self.store.saved_steps, trainer.step])
            # and what the callbacks after this one add at their on_fit_end (`system`, the sinks' run ids), as it
            # stands now: a recovered summary lacked them (rerun.recorded_summary names them)
            later = {k: v for k, v in trainer.summary_keys_to_come().items() if k not in record}
            record.update(later)
            record[LATER_KEYS] = sorted(later)
            self.save(trainer, final=True, summary=recorded_text(record))
        self.store.close()
        self.signal.uninstall()
        self._add_section(trainer, summary, list(self.store.saved_steps))

    def _add_section(self, trainer: TrainerView, summary: dict[str, Any], saved: list[int]) -> None:
        """summary.json's checkpoint keys; `saved`: the steps this process saved."""
        assert self.store is not None and self.guard is not None
        summary["checkpoint_count"] = len(saved)
        summary["checkpoint_stall_s"] = self.stall_s
        summary["checkpoint"] = {
            "dir": str(self.store.root),
            "saved_steps": list(saved),
            "stall_s": self.stall_s,
            "stall_parts_s": dict(self.stall_parts),  # capture, wait_previous, prepare, stage_copy/write, launch
            "save_s": list(self.store.save_seconds),
            "async": trainer.cfg.checkpoint.async_save,
            "staging": self.staging if trainer.cfg.checkpoint.async_save else None,
            "resumed_from": self.resumed.folder.name if self.resumed and self.resumed.folder else None,
            "skipped_on_resume": list(self.resumed.skipped) if self.resumed else [],
            "resume_changes": list(self.resume_changes),
            "extended_from": list(self.verdict.extended_from),  # train.steps of the earlier segments of this run
            "rollbacks": self.rollbacks,
            # each rollback of this process (from_step, to_step, reason); the steps it trained again, counted once
            # in timed_steps and metrics.jsonl, were trained twice: rolled_back_steps
            "rollback_events": [dict(e) for e in self.rollback_events],
            "rolled_back_steps": sum(e["from_step"] - e["to_step"] for e in self.rollback_events),
            "nonfinite_steps": self.guard.nonfinite_steps,
            "loss_spikes": self.guard.spikes,
        }


    def on_fit_abort(self, trainer: TrainerView, exc: BaseException) -> None:
        """A crash in one process: the save in flight commits (or fails whole) before the folder is let go.

        With several ranks the store is left as it was: its close waits on a vote the crashed job may never
        hold. The stop signal's handler stays (see on_step_end)."""
        if self.store is not None and rank_and_world()[1] == 1:
            with contextlib.suppress(Exception):
                self.store.close()


def _ends_here(trainer: TrainerView) -> str:
    """Why the run ends at this step whatever a stop signal says ('' if it does not): its last step, or the step
    whose validation reached `train.target_val_loss` (the trainer stops after it; its record is in the history,
    alike on every rank)."""
    t = trainer.cfg.train
    if trainer.step >= t.steps:
        return "the run's last step"
    if t.target_val_loss is not None:
        for rec in reversed(trainer.history):
            if rec.get("step") != trainer.step:
                break
            val = rec.get("val_loss")
            if isinstance(val, int | float) and val <= t.target_val_loss:
                return f"where the run reached train.target_val_loss = {t.target_val_loss:g}"
    return ""


def choose_staging(asked: str, device: torch.device, buffers: list[str]) -> tuple[str, str]:
    """Where async saves copy the state ("loop" or "background"), and a log line when it is not what was asked.

    Background needs a state that forward and backward leave alone (no buffers: BatchNorm's running
    statistics change in forward). For "auto" it also needs the copy not to hold up other ranks. On CUDA
    the copy is a device-to-host transfer and the CPU is free. On CPU (docs/checkpoint.md, Async saves):
    one process, `benchmarks/checkpoint.py`, 353 MB: the stall fell from 0.054 s to 0.001 s and save +
    next step from 0.327 s to 0.254 s with a core free (1 thread), and stayed equal (0.241 / 0.243 s)
    with both cores training; 2 DDP ranks of 1 thread on 2 cores, saving every 3 steps: the mean step
    7 % slower than with the copy in the loop (the copy thread preempts a rank, and the all-reduce waits
    for it). So "auto" keeps the copy in the loop only where several ranks take every core of the node.
    """
    if asked == "loop":
        return "loop", ""
    if buffers:
        return "loop", (f"the model's state holds buffers ({', '.join(buffers[:3])}...), which forward may change: "
                        f"async saves copy the state in the step loop (checkpoint.staging = {asked} not followed)")
    if asked == "background" or device.type == "cuda":
        return "background", ""
    ranks, cores, threads = _local_ranks(), len(available_cores()), torch.get_num_threads()
    if ranks == 1 or cores > ranks * threads:
        return "background", ""
    return "loop", (f"checkpoint.staging = auto: {ranks} ranks x {threads} threads on {cores} cores leave no core for "
                    "a background copy, so async saves copy the state in the step loop (staging=background forces it)")


def _local_ranks() -> int:
    """Training processes on this node (torchrun's LOCAL_WORLD_SIZE; 1 outside torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def _state_buffers(model: torch.nn.Module) -> list[str]:
    """Names in the model's state dict that are not parameters (buffers, e.g. BatchNorm running stats)."""
    params = {name for name, _ in model.named_parameters()}
    return [k for k in model.state_dict() if k not in params]
