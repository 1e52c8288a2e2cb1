"""samples/s, timesteps/s and FLOPs count the batches a run trained, not `train.batch_size` (outside audit 13, M3: an
iterable of 16-sample batches under a config of 64 read 4x the samples/s it trained)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from helpers import small_config  # noqa: E402
from sized_batches import SizedBatches  # noqa: E402

from stride.bench.runner import throughput_windows  # noqa: E402
from stride.train.trainer import Trainer  # noqa: E402

SEQ, FEAT, HORIZONS = 16, 3, 2
PER_SAMPLE_FLOPS = 2 * 2 * SEQ * FEAT * HORIZONS  # Linear(48 -> 2): forward and weight gradient, 2 FLOPs a MAC


def _batches(sizes: list[int]) -> SizedBatches:
    """Batches of the sizes given, in turn (its own batch size, a short last batch)."""
    return SizedBatches.random(sizes, SEQ, FEAT, HORIZONS, seed=0)


def _fit(tmp_path: Path, sizes: list[int], steps: int, skip: int, accum: int = 1) -> tuple[Trainer, dict]:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(SEQ * FEAT, HORIZONS))
    cfg = small_config(train__batch_size=64, train__steps=steps, metrics__skip_steps=skip, metrics__flops=True,
                       metrics__log_every=1, train__grad_accum=accum, data__seq_len=SEQ)
    tr = Trainer(model=model, train_data=_batches(sizes), config=cfg, out=tmp_path / "run")
    return tr, tr.fit().summary


def test_samples_per_s_counts_the_batches_trained(tmp_path: Path) -> None:
    sizes = [16, 16, 16, 8]  # an epoch: three batches of the iterable's own 16, then a short one
    steps, skip = 10, 2
    tr, s = _fit(tmp_path, sizes, steps, skip)
    trained = [sizes[i % len(sizes)] for i in range(steps)]
    walls = tr.timer.step_seconds
    assert tr.step_samples == trained
    timed = trained[skip:]
    assert s["samples_per_s"] == pytest.approx(sum(timed) / sum(walls[skip:]), rel=1e-9)
    assert s["timesteps_per_s"] == pytest.approx(s["samples_per_s"] * SEQ, rel=1e-12)
    # the FLOPs of the mean timed step: counted on the first (16-sample) batch, a model's FLOPs per sample are fixed
    assert s["flops_per_step"] == round(PER_SAMPLE_FLOPS * sum(timed) / len(timed))
    assert s["achieved_flops_per_s"] == pytest.approx(s["flops_per_step"] / s["step_time_s"], rel=1e-12)
    # metrics.jsonl: each logged step's own batch over its own wall time
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["samples_per_s"] for r in logged if "samples_per_s" in r]
    assert rates == pytest.approx([n / w for n, w in zip(trained, walls, strict=True)], rel=1e-9)


def test_a_constant_batch_of_its_own_size(tmp_path: Path) -> None:
    """The audit's case: 16-sample batches under train.batch_size = 64; samples/s is 16 / the step time, not 64 /."""
    _, s = _fit(tmp_path, [16] * 4, steps=8, skip=2)
    assert s["samples_per_s"] * s["step_time_s"] == pytest.approx(16, rel=1e-9)
    assert s["flops_per_step"] == 16 * PER_SAMPLE_FLOPS


def test_grad_accum_counts_every_row(tmp_path: Path) -> None:
    """Under grad_accum = 2 a 15-sample batch trains micro-batches of 7 and 8 (it used to leave the 15th out, and count
    14): every row is trained and counted."""
    tr, s = _fit(tmp_path, [16, 15], steps=4, skip=0, accum=2)
    assert tr.step_samples == [16, 15, 16, 15]
    assert s["samples_per_s"] == pytest.approx(62 / sum(tr.timer.step_seconds), rel=1e-9)


def test_bench_windows_use_each_steps_samples() -> None:
    times = [9.0, 9.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0]
    assert throughput_windows(times, 2, [0, 0, 16, 16, 8, 8, 16, 8]) == [16.0, 8.0, 6.0]
    assert throughput_windows(times, 2, 10) == throughput_windows(times, 2, [10] * 8)
