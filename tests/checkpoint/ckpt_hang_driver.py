"""`stride train` with one rank that stops taking part: rank 1 sleeps at the end of step SLEEP_AT.

Run with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set; writes the time rank 1 fell asleep to MARKER.
SLEEP_BEFORE_CHECKPOINT=1: rank 1 falls asleep before its checkpoint callback (so rank 0 waits in the save).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from stride.checkpoint import CheckpointCallback
from stride.cli.main import main
from stride.train import trainer as tr
from stride.train.callbacks import Callback, TrainerView


class FallAsleep(Callback):
    def on_step_end(self, trainer: TrainerView) -> None:
        if trainer.step == int(os.environ["SLEEP_AT"]) and os.environ.get("RANK") == "1":
            Path(os.environ["MARKER"]).write_text(repr(time.time()))
            time.sleep(600)


_init = tr.Trainer.__init__


def _init_with_sleeper(self: tr.Trainer, *args, callbacks=(), **kwargs) -> None:
    if os.environ.get("SLEEP_BEFORE_CHECKPOINT") == "1":
        callbacks = [FallAsleep(), *callbacks]  # the checkpoint callback the config asks for comes after
    else:
        callbacks = [*callbacks, CheckpointCallback(), FallAsleep()]
    _init(self, *args, callbacks=callbacks, **kwargs)


tr.Trainer.__init__ = _init_with_sleeper

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
