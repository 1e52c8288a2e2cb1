"""Gradient accumulation as a switch (outside audit of the efficiency switches): k micro-batches train the same step as
one batch, checked against a float64 single-step reference, including batches that k does not divide (an iterable's
short last batch), clipping of the accumulated gradient, and the samples and FLOPs a step is credited with."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from helpers import small_config  # noqa: E402
from sized_batches import SizedBatches  # noqa: E402

from stride.train.trainer import Trainer  # noqa: E402

SEQ, FEAT, H = 8, 3, 2
LR = 0.5  # plain SGD (no momentum, no decay): the update is lr x the gradient, so any error in it shows


def _batches(sizes: list[int]) -> SizedBatches:
    """Batches of the sizes given, in turn (an epoch ending in short batches)."""
    return SizedBatches.random(sizes, SEQ, FEAT, H, seed=1)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(SEQ * FEAT, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, H))


def _train(sizes: list[int], accum: int, clip: float | None, steps: int, **extra: object) -> tuple[Trainer, dict]:
    cfg = small_config(train__batch_size=16, train__grad_accum=accum, train__steps=steps, optim__name="sgd",
                       optim__lr=LR, optim__momentum=0.0, optim__weight_decay=0.0, optim__warmup_steps=0,
                       optim__schedule="constant", metrics__log_every=1, **extra)
    cfg.train.grad_clip = clip
    tr = Trainer(model=_model(), train_data=_batches(sizes), config=cfg, write_run_dir=False)
    return tr, tr.fit().summary


def _reference(sizes: list[int], clip: float | None, steps: int) -> tuple[torch.nn.Module, list[float]]:
    """The same steps in float64, each over its whole batch at once: loss, gradient, clip, p -= lr x grad."""
    model = copy.deepcopy(_model()).double()
    losses = []
    batches = list(_batches(sizes))
    for s in range(steps):
        x, y = batches[s % len(batches)]
        loss = F.mse_loss(model(x.double()), y.double())
        model.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
        losses.append(loss.item())
    return model, losses


def _max_rel_update_error(tr: Trainer, ref: torch.nn.Module) -> float:
    """Largest error of the trained weights against the float64 reference, relative to how far the reference moved."""
    start = _model()
    err = moved = 0.0
    for p, r, p0 in zip(tr.model.parameters(), ref.parameters(), start.parameters(), strict=True):
        err = max(err, (p.double() - r).abs().max().item())
        moved = max(moved, (r - p0.double()).abs().max().item())
    return err / moved


@pytest.mark.parametrize("clip", [None, 0.05])
@pytest.mark.parametrize("accum", [1, 2, 4])
def test_accumulated_steps_equal_one_float64_step_over_the_whole_batch(accum: int, clip: float | None) -> None:
    """Equal micro-batches: every step's weights and loss match float64's one step over the batch; with a clip of 0.05
    (the gradient norm is ~1, so every step is clipped) the accumulated gradient is clipped once, as the reference's:
    clipping each micro-batch's gradient would give a different update."""
    sizes, steps = [16, 16, 16], 3
    tr, s = _train(sizes, accum, clip, steps)
    ref, losses = _reference(sizes, clip, steps)
    assert _max_rel_update_error(tr, ref) < 1e-5
    logged = [h["loss"] for h in tr.history if "loss" in h]
    assert logged == pytest.approx(losses, rel=1e-5)
    assert tr.step_samples == [16, 16, 16]


@pytest.mark.parametrize("clip", [None, 0.05])
def test_a_short_last_batch_is_trained_whole_under_grad_accum(clip: float | None) -> None:
    """An epoch of 16, 15 and 3 samples under grad_accum = 4: the 15-sample batch used to train 3 micro-batches of 3
    (12 rows, 3 dropped: its update differed from one step over its rows) and the 3-sample batch 4 empty micro-batches
    (a NaN loss; the run stopped as diverged). Now each step trains every row, in micro-batches of nearly equal size
    weighted by their rows, and equals the float64 step over the whole batch."""
    sizes, steps = [16, 15, 3], 3
    tr, s = _train(sizes, 4, clip, steps)
    ref, losses = _reference(sizes, clip, steps)
    assert s["status"] == "finished"
    assert tr.step_samples == [16, 15, 3]
    assert _max_rel_update_error(tr, ref) < 1e-5
    assert [h["loss"] for h in tr.history if "loss" in h] == pytest.approx(losses, rel=1e-5)
    # the same run without accumulation trains the same rows: the two agree to float32 rounding
    one, _ = _train(sizes, 1, clip, steps)
    for p, q in zip(one.model.parameters(), tr.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_a_first_batch_smaller_than_grad_accum_counts_its_flops() -> None:
    """FLOPs are counted on the first batch; one of 3 rows under grad_accum = 4 was counted on an empty slice (0 FLOPs,
    no MFU). Now on its 3 rows, and the mean step's FLOPs follow the samples trained (samples/s and MFU agree)."""
    _, full = _train([16], 4, None, 2, metrics__flops=True)
    per_sample = full["flops_per_step"] / 16
    tr, s = _train([3, 16], 4, None, 4, metrics__flops=True)
    assert tr.step_samples == [3, 16, 3, 16]
    assert s["flops_per_step"] == pytest.approx(per_sample * (3 + 16) / 2, rel=1e-6)
