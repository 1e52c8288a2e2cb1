"""The compiled optimizer step drops only Dynamo's note about torch.optim's own profiler range (audit 12 F9)."""

from __future__ import annotations

import logging

import torch

from stride.optim.factory import compiled_step


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("torch._dynamo.variables.ctx_manager", logging.WARNING, __file__, 1, msg, (), None)


def test_only_the_profiler_range_note_is_dropped():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    compiled_step(opt)  # builds the compiled function; nothing is compiled until it is called
    compiled_step(opt)
    log = logging.getLogger("torch._dynamo.variables.ctx_manager")
    mine = [f for f in log.filters if type(f).__name__ == "_DropOptimizerRangeNote"]
    assert len(mine) == 1  # added once, however many steps are compiled
    note = _record("Profiler record function %s will be ignored")
    other = _record("Graph break: something else")
    assert not log.filter(note)
    assert log.filter(other)
