"""Step guard: a non-finite loss or gradient norm skips the update; K in a row, or a loss spike, asks for a rollback.

The checkpoint callback asks `allow()` after backward and before the optimizer step. Reading the loss and the
norm as Python floats synchronises with the device once per step; that is the price of never
applying a NaN update (on CPU it costs nothing measurable).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from stride.parallel.ranks import rank_and_world
from stride.parallel.watchdog import collective
from stride.train.callbacks import TrainerView

MIN_HISTORY = 8  # losses needed before the spike detector judges
ROLLBACK = 256  # in the vote's second float: above every signal number (a stop request)


def encode_vote(ok: bool, rollback: bool, stop: int) -> list[float]:
    """This rank's vote: [skip, ROLLBACK or the stop signal (0: none)]; ranks combine votes with MAX."""
    return [0.0 if ok else 1.0, float(ROLLBACK if rollback else stop)]


def decode_vote(flags: list[float]) -> tuple[bool, bool, int]:
    """(skip, rollback, stop signal) from the MAX of every rank's vote; a rollback defers a stop to the next vote."""
    second = int(flags[1])
    return bool(flags[0]), second >= ROLLBACK, 0 if second >= ROLLBACK else second


class StepGuard:
    def __init__(
        self,
        nan_rollback_after: int = 3,
        spike_threshold: float | None = None,
        spike_window: int = 50,
        spike_action: str = "log",
        log: Callable[[str], None] = print,
    ) -> None:
        self.nan_rollback_after = nan_rollback_after
        self.spike_threshold, self.spike_action = spike_threshold, spike_action
        self.window: deque[float] = deque(maxlen=spike_window)
        self.log = log
        self.consecutive_nonfinite = 0
        self.nonfinite_steps = 0
        self.spikes = 0
        self.rollback_reason: str | None = None  # set when the callback should roll back
        # Called first in allow(), i.e. after backward and before the optimizer changes any state: the
        # checkpoint callback waits there for a background staging copy of the previous save.
        self.before_update: Callable[[], None] | None = None
        # This rank's pending stop request (a signal number, 0: none), set by the checkpoint callback. It
        # rides on the vote below, so every rank learns in the same step that some rank was signalled.
        self.stop_request: Callable[[], int] | None = None
        self.stop_vote: tuple[int, int] | None = None  # (step, the signal any rank asked to stop on; 0: none)

    def allow(self, trainer: TrainerView, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> bool:
        """Whether the optimizer may apply this step's gradients (the same answer on every rank)."""
        if self.before_update is not None:
            self.before_update()
        ok = self._judge(trainer, loss, grad_norm)
        if rank_and_world()[1] > 1:
            # Each rank judges its own loss; one rank skipping alone would desynchronise the replicas.
            # A preemption signal reaches ranks at different moments: its flag rides on this vote, so all
            # ranks stop after the same step. It is encoded into the second float, not added as a third:
            # on gloo a 3-float all-reduce took 35-45 us more than a 2-float one, a separate 1-float
            # all-reduce 90-105 us (benchmarks/stop_vote.py). A rollback (ROLLBACK) outranks a stop (a
            # signal number, < 65): that step rolls back, and the still-set stop flag goes to the next vote.
            stop = self.stop_request() if self.stop_request is not None else 0
            flags = torch.tensor(encode_vote(ok, self.rollback_reason is not None, stop), device=trainer.device)
            with collective("step-guard vote (skip/rollback/stop all-reduce)"):
                dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            skip, rollback, stop = decode_vote(flags.tolist())
            ok = not skip
            if rollback and self.rollback_reason is None:
                self.rollback_reason = f"another rank asked for a rollback at step {trainer.step + 1}"
            self.stop_vote = (trainer.step + 1, stop)
        return ok

    def _judge(self, trainer: TrainerView, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> bool:
        step = trainer.step + 1
        loss_v = float(loss)
        scaled = trainer.loss_scaled  # fp16: the GradScaler skips inf/NaN steps itself
        if grad_norm is None and not scaled:
            grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
            grad_norm = torch.nn.utils.get_total_norm(grads) if grads else None
        gn = float(grad_norm) if grad_norm is not None else 0.0
        if not (math.isfinite(loss_v) and math.isfinite(gn)):
            self.consecutive_nonfinite += 1
            self.nonfinite_steps += 1
            k, limit = self.consecutive_nonfinite, self.nan_rollback_after
            what = "left to the fp16 loss scaler" if scaled else "update skipped"
            self.log(f"step {step}: non-finite loss={loss_v} grad_norm={gn}: {what} ({k} in a row"
                     + (f", rollback at {limit})" if limit else ")"))
            if limit and k >= limit:
                self.rollback_reason = f"{k} non-finite steps in a row (last at step {step})"
            return scaled
        self.consecutive_nonfinite = 0
        if self.spike_threshold is not None and len(self.window) >= min(MIN_HISTORY, self.window.maxlen or 1):
            median = statistics.median(self.window)
            if median > 0 and loss_v > self.spike_threshold * median:
                self.spikes += 1
                self.log(f"step {step}: loss spike {loss_v:.4g} > {self.spike_threshold} x running median "
                         f"{median:.4g} (action: {self.spike_action})")
                if self.spike_action == "rollback":
                    self.rollback_reason = f"loss spike at step {step} ({loss_v:.4g} vs median {median:.4g})"
                    return False
                if self.spike_action == "skip":
                    return False
        self.window.append(loss_v)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"window": list(self.window), "nonfinite_steps": self.nonfinite_steps, "spikes": self.spikes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window.clear()
        self.window.extend(float(v) for v in state.get("window", []))
        self.nonfinite_steps = int(state.get("nonfinite_steps", 0))
        self.spikes = int(state.get("spikes", 0))
        self.consecutive_nonfinite = 0
        self.rollback_reason = None
