"""`stride train` with one rank that stops taking part: rank 1 sleeps at the end of step SLEEP_AT.

Run with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set; writes the time rank 1 fell asleep to MARKER.
SLEEP_BEFORE_CHECKPOINT=1: rank 1 falls asleep before its checkpoint callback (so rank 0 waits in the save).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from stride.cli.main import main
from stride.train import trainer as tr


class FallAsleep(tr.Callback):
    def on_step_end(self, trainer: tr.Trainer) -> None:
        if trainer.step == int(os.environ["SLEEP_AT"]) and os.environ.get("RANK") == "1":
            Path(os.environ["MARKER"]).write_text(repr(time.time()))
            time.sleep(600)


_init = tr.Trainer.__init__


def _init_with_sleeper(self: tr.Trainer, *args, **kwargs) -> None:
    _init(self, *args, **kwargs)
    if os.environ.get("SLEEP_BEFORE_CHECKPOINT") == "1":
        self.callbacks.insert(0, FallAsleep())
    else:
        self.callbacks.append(FallAsleep())


tr.Trainer.__init__ = _init_with_sleeper

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
