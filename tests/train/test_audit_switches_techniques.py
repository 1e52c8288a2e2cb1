"""Activation checkpointing, fp16 loss scaling and keys without effect, as switches (outside audit of the efficiency
switches): a switch changes memory or speed, not the numbers, and one the config leaves without effect is named."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from helpers import small_config  # noqa: E402

from stride.config import load_config  # noqa: E402
from stride.train.trainer import Trainer  # noqa: E402
from stride.train.unused_keys import unused_keys  # noqa: E402


def _params(tr: Trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in tr.model.parameters()])


def test_activation_checkpointing_with_dropout_trains_the_same_bits_and_counts_model_flops() -> None:
    """Dropout draws random masks; the recomputed forward must draw the same ones (torch's checkpoint restores the RNG
    state) or the gradients differ from the run without checkpointing. Same process: bitwise. The FLOPs MFU is read
    from are the model's, counted before checkpointing, so the recomputed forward is not counted as model FLOPs."""
    kw = dict(model__n_layers=2, model__dropout=0.2, train__steps=4, metrics__flops=True)
    a = Trainer(config=small_config(**kw), write_run_dir=False)
    sa = a.fit().summary
    b = Trainer(config=small_config(train__activation_checkpointing="full", **kw), write_run_dir=False)
    sb = b.fit().summary
    assert sb["activation_checkpointed_blocks"] == 2 and sa["activation_checkpointed_blocks"] == 0
    assert torch.equal(_params(a), _params(b))
    assert sb["final_train_loss"] == sa["final_train_loss"]
    assert sb["flops_per_step"] == sa["flops_per_step"] > 0


def _fp16(steps: int = 1) -> Trainer:
    return Trainer(config=small_config(train__precision="fp16", train__steps=steps, optim__warmup_steps=0),
                   write_run_dir=False)


@pytest.mark.parametrize("clip", [1.0, None])
def test_an_fp16_overflow_skips_the_step_and_halves_the_scale(clip: float | None) -> None:
    """A loss scale of 2**60 overflows fp16 gradients: the step must leave the weights as they were, count a skipped
    step and halve the scale (with clipping, which unscales first, and without)."""
    tr = _fp16()
    tr.cfg.train.grad_clip = clip
    tr.setup()
    tr.precision.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**60)
    before = _params(tr).clone()
    s = tr.fit().summary
    assert s["skipped_steps"] == 1 and s["loss_scale"] == 2.0**59
    assert torch.equal(_params(tr), before)


def test_the_fp16_scaler_state_resumes_exactly() -> None:
    """The scale and its growth tracker go through the trainer's state dict: a resumed run continues both."""
    tr = _fp16(5)
    s = tr.fit().summary
    state = tr.state_dict()
    fresh = _fp16(5)
    fresh.setup()
    fresh.load_state_dict(state)
    assert fresh.precision.scaler.get_scale() == s["loss_scale"] == tr.precision.scaler.get_scale()
    assert fresh.precision.scaler.state_dict() == tr.precision.scaler.state_dict()
    assert tr.precision.scaler.state_dict()["_growth_tracker"] > 0  # a non-default tracker was carried


@pytest.mark.parametrize(("override", "named"), [
    (["train.ac_every=4"], "`train.ac_every` = 4 acts on `train.activation_checkpointing` = 'every_k'"),
    (["train.activation_checkpointing='full'", "train.ac_every=3"], "`train.ac_every` = 3"),
    (["optim.momentum=0.5"], "`optim.momentum` = 0.5 acts on `optim.name` = 'sgd'"),
    (["optim.name='sgd'", "optim.betas=[0.8, 0.9]"], "`optim.betas` = [0.8, 0.9]"),
    (["optim.name='sgd'", "optim.eps=1e-6"], "`optim.eps` = 1e-06"),
    (["optim.name='adafactor'", "optim.eps=1e-6"], "`optim.eps` = 1e-06"),
    (["optim.schedule='constant'", "optim.min_lr_ratio=0.5"], "`optim.min_lr_ratio` = 0.5"),
    (["model.huber_delta=0.5"], "`model.huber_delta` = 0.5 acts on `model.loss` = 'huber'"),
    (["model.quantiles=[0.25, 0.75]"], "`model.quantiles` = [0.25, 0.75]"),
])
def test_a_key_the_config_leaves_without_effect_is_named(override: list[str], named: str) -> None:
    """Each of these keys was accepted and ignored with no word: a run with `train.ac_every = 4` and no every_k
    checkpointing, or `optim.eps` with adafactor (whose own eps is not `optim.eps`), looked like it had applied it."""
    unused = unused_keys(load_config("configs/quickstart.toml", override))
    assert len(unused) == 1 and unused[0].startswith(named), unused


@pytest.mark.parametrize("override", [
    [], ["train.activation_checkpointing='every_k'", "train.ac_every=3"], ["optim.name='sgd'", "optim.momentum=0.5"],
    ["optim.name='adamw8bit'", "optim.eps=1e-6"], ["model.loss='huber'", "model.huber_delta=0.5"],
    ["model.loss='quantile'", "model.quantiles=[0.25, 0.75]"], ["optim.min_lr_ratio=0.5"],
])
def test_keys_that_act_are_not_named(override: list[str]) -> None:
    assert unused_keys(load_config("configs/quickstart.toml", override)) == []


def test_the_trainer_says_which_keys_had_no_effect(caplog: pytest.LogCaptureFixture) -> None:
    """The notice reaches the user once, on one line, when the trainer is built (stride train prints it to stderr)."""
    with caplog.at_level(logging.WARNING, logger="stride"):
        Trainer(config=small_config(train__ac_every=5, model__n_layers=2), write_run_dir=False)
    lines = [r.getMessage() for r in caplog.records if "no effect in this run" in r.getMessage()]
    assert lines == ["stride.train: no effect in this run: `train.ac_every` = 5 acts on "
                     "`train.activation_checkpointing` = 'every_k' only"]


def test_adamw8bit_with_a_compiled_optimizer_step_is_refused_up_front() -> None:
    """compile=model+optimizer with adamw8bit: its step is `torch.compiler.disable`d, so the "compiled" step ran eager
    while summary.json said model+optimizer; now a ConfigError naming both keys, as for adafactor."""
    from stride.config import ConfigError

    over = ["model.name='mlp'", "train.threads=1", "metrics.progress=false", "train.val_every=0"]
    cfg = load_config("configs/quickstart.toml", over + ["optim.name='adamw8bit'", "train.compile='model+optimizer'"])
    with pytest.raises(ConfigError, match=r"`train.compile` = 'model\+optimizer' with `optim.name` = 'adamw8bit'"):
        Trainer(config=cfg, write_run_dir=False)
    cfg = load_config("configs/quickstart.toml", over + ["optim.name='adamw8bit'", "train.compile='model'"])
    Trainer(config=cfg, write_run_dir=False)


def test_fused_kernels_that_replace_nothing_are_reported_as_torch(caplog: pytest.LogCaptureFixture) -> None:
    """`train.kernels` = 'compile' with a caller's model (no RMSNorm, SwiGLU or attention) and the caller's loss: no op
    was fused, yet summary.json said kernels 'compile'. Now it says 'torch' and a notice says why; a model the kernels
    do act on (its loss at least: the built-in MLP's [model] loss is the fused one) keeps the kernels' name."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 16, 3), torch.randn(64, 2)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 2))
    cfg = small_config(train__kernels="compile", train__steps=2, data__seq_len=16)
    with caplog.at_level(logging.WARNING, logger="stride"):
        tr = Trainer(model=model, train_data=(x, y), config=cfg, write_run_dir=False,
                     loss_fn=lambda p, t: torch.nn.functional.mse_loss(p, t))
    assert tr.fit().summary["kernels"] == "torch"
    assert any("`train.kernels` = 'compile' has no effect" in r.getMessage() for r in caplog.records)
    built = Trainer(config=small_config(train__kernels="compile", model__name="mlp"), write_run_dir=False)
    assert built.kernels_impl == "compile"


def test_fused_sgd_is_a_switch_that_runs() -> None:
    """`optim.impl` = 'fused' with sgd was refused ("not available for sgd here") though torch's SGD has a fused CPU
    kernel; now it runs it (summary.json optimizer_impl 'fused') and trains the weights of the foreach step."""
    runs = {}
    for impl in ("foreach", "fused"):
        tr = Trainer(config=small_config(optim__name="sgd", optim__impl=impl, model__name="mlp"), write_run_dir=False)
        runs[impl] = (tr.fit().summary["optimizer_impl"], _params(tr))
    assert runs["fused"][0] == "fused" and runs["foreach"][0] == "foreach"
    torch.testing.assert_close(runs["fused"][1], runs["foreach"][1], rtol=0, atol=1e-6)
