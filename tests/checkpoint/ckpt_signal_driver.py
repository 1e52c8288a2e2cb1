"""`stride train` in one rank that may signal itself: SIGTERM/SIGUSR1 at a chosen step and moment.

Run with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set. SELF_SIGNAL="RANK:STEP:WHEN:NAME[,...]":
rank RANK sends itself signal NAME (TERM or USR1) in step STEP, WHEN = "mid" (in the step's forward,
before the ranks' vote) or "end" (at the step's end, after the vote and before the checkpoint callback).
Without SELF_SIGNAL it is plain `stride train` (the test may signal it from outside).
"""

from __future__ import annotations

import os
import signal
import sys

from stride.cli.main import main
from stride.train import trainer as tr
from stride.train.callbacks import Callback, TrainerView

RANK = int(os.environ.get("RANK", "0"))
PLAN = [tuple(item.split(":")) for item in os.environ.get("SELF_SIGNAL", "").split(",") if item]
MINE = [(int(step), when, getattr(signal, f"SIG{name}")) for r, step, when, name in PLAN if int(r) == RANK]


class SignalAtStepEnd(Callback):
    def on_step_end(self, trainer: TrainerView) -> None:
        for step, when, sig in MINE:
            if when == "end" and trainer.step == step:
                os.kill(os.getpid(), sig)


def _arm_mid_step(trainer: tr.Trainer) -> None:
    def pre_forward(module, args) -> None:
        for step, when, sig in MINE:
            if when == "mid" and trainer.step + 1 == step:  # trainer.step counts completed steps
                os.kill(os.getpid(), sig)

    trainer.model.register_forward_pre_hook(pre_forward)


_init = tr.Trainer.__init__


def _init_with_signals(self: tr.Trainer, *args, callbacks=(), **kwargs) -> None:
    _init(self, *args, callbacks=[SignalAtStepEnd(), *callbacks], **kwargs)  # before the checkpoint callback
    _arm_mid_step(self)


tr.Trainer.__init__ = _init_with_signals

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
