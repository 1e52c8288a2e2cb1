"""The common step's short path (`Trainer._plain_step`) gives the bits of the general `train_step`: the same losses,
weights and metrics figures, step for step."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from helpers import small_config  # noqa: E402

from stride.train.trainer import Trainer  # noqa: E402


def _run(plain: bool, **over) -> tuple[list[float], list[torch.Tensor], int]:
    tr = Trainer(config=small_config(train__steps=6, **over), write_run_dir=False)
    tr.setup()
    assert tr._plain  # one process, fp32, one micro-step on the CPU
    tr._plain = plain
    losses = []
    for _ in range(6):
        x, y = tr.next_batch()
        losses.append(tr.train_step(x, y).item())
        tr.step += 1
    return losses, [p.detach().clone() for p in tr.model.parameters()], tr.saved_activation_bytes


def test_plain_step_is_the_general_step_bit_for_bit() -> None:
    for over in ({}, {"train__grad_clip": None}):
        a_loss, a_params, a_saved = _run(True, **over)
        b_loss, b_params, b_saved = _run(False, **over)
        assert a_loss == b_loss
        assert all(torch.equal(a, b) for a, b in zip(a_params, b_params, strict=True))
        assert a_saved == b_saved and a_saved is not None  # the first step still measures the saved activations


def test_plain_step_only_where_nothing_else_is_needed() -> None:
    for over in ({"train__grad_accum": 2}, {"train__precision": "bf16"}):
        tr = Trainer(config=small_config(train__steps=1, **over), write_run_dir=False)
        tr.setup()
        assert not tr._plain
