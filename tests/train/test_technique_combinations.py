"""Combinations of training techniques that cannot run are refused before the first step with one line naming the
keys; those that run use the technique the config names (no silent fallback)."""

from __future__ import annotations

import pytest

from stride.config import ConfigError, load_config
from stride.train.trainer import Trainer

TINY = ["model.name='mlp'", "data.n_assets=4", "data.n_steps=1024", "data.seq_len=8", "data.horizons=[1, 5]",
        "train.batch_size=32", "train.val_every=0", "train.threads=1", "metrics.progress=false"]


def test_triton_kernels_under_the_interpreter_with_compile_are_refused_up_front(monkeypatch):
    """TRITON_INTERPRET=1 + kernels=triton + compile: dynamo traced the interpreter and died at the first step with an
    InterpreterError traceback; now a ConfigError naming both keys before anything is built."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytest.importorskip("triton")
    for mode in ("model", "model+optimizer"):
        cfg = load_config(overrides=TINY + ["train.kernels='triton'", f"train.compile='{mode}'", "train.steps=1"])
        with pytest.raises(ConfigError, match=r"`train.kernels` = 'triton' with `train.compile`"):
            Trainer(config=cfg, write_run_dir=False)
    # either alone still runs
    cfg = load_config(overrides=TINY + ["train.kernels='triton'", "train.steps=1"])
    Trainer(config=cfg, write_run_dir=False)


def _fp16(clip: float | None, *extra: str):
    cfg = load_config(overrides=TINY + ["train.precision='fp16'", "train.steps=3", "optim.warmup_steps=0", *extra])
    cfg.train.grad_clip = clip  # None: no clipping, so no unscale before the step
    return cfg


@pytest.mark.parametrize("clip", [1.0, None])
def test_fp16_with_a_compiled_optimizer_step_runs_the_compiled_step(clip):
    """precision=fp16 + compile=model+optimizer: GradScaler.step called optimizer.step itself, so the compiled step
    never ran (0 calls in 3 steps) while the config said model+optimizer. Now the compiled step runs every step that
    has no overflow, after the unscale, with and without clipping (which unscales first), and trains as eager fp16."""
    t = Trainer(config=_fp16(clip, "train.compile='model+optimizer'"), write_run_dir=False)
    t.setup()
    calls = []
    compiled = t._opt_step

    def counted() -> None:
        calls.append(1)
        compiled()

    t._opt_step = counted
    s = t.fit().summary
    assert len(calls) == 3 - s["skipped_steps"] and len(calls) >= 2
    e = Trainer(config=_fp16(clip), write_run_dir=False).fit().summary
    assert s["skipped_steps"] == e["skipped_steps"]
    assert s["final_train_loss"] == pytest.approx(e["final_train_loss"], rel=1e-3)


@pytest.mark.parametrize("name", ["adamw8bit", "adafactor", "adamw_triton"])
def test_a_torch_impl_asked_of_strides_own_optimizer_is_refused(name, tmp_path):
    """`optim.impl` = 'fused' with adamw8bit trained with the 8-bit torch path and summary.json said
    optimizer_impl 'torch' against a config saying 'fused'; now one config-error line naming both keys, exit 2."""
    import subprocess
    import sys

    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    r = subprocess.run([sys.executable, "-m", "stride", "train", str(cfg), "--out", str(tmp_path / "r"),
                        *[a for o in TINY + [f"optim.name='{name}'", "optim.impl='fused'", "train.steps=2"]
                          for a in ("--set", o)]], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert "`optim.impl` = 'fused'" in lines[0] and f"`optim.name` = '{name}'" in lines[0]
    assert not (tmp_path / "r" / "summary.json").exists()


def test_adafactor_with_a_compiled_optimizer_step_is_refused_up_front():
    """compile=model+optimizer with adafactor: dynamo broke the graph on each tensor's step count, recompiled per
    parameter up to its limit (26 warning lines) and the "compiled" step ran slower than eager; now refused."""
    cfg = load_config(overrides=TINY + ["optim.name='adafactor'", "train.compile='model+optimizer'", "train.steps=1"])
    with pytest.raises(ConfigError, match=r"`train.compile` = 'model\+optimizer' with `optim.name` = 'adafactor'"):
        Trainer(config=cfg, write_run_dir=False)
    Trainer(config=load_config(overrides=TINY + ["optim.name='adafactor'", "train.compile='model'"]),
            write_run_dir=False)


def test_summary_names_the_compile_mode():
    """summary.json named precision, kernels and the optimizer's implementation but not whether the model (and the
    optimizer step) was compiled: two runs differing only in train.compile had summaries that could not tell."""
    s = Trainer(config=load_config(overrides=TINY + ["train.steps=2"]), write_run_dir=False).fit().summary
    assert s["compile"] == "off"
    s = Trainer(config=load_config(overrides=TINY + ["train.steps=2", "train.compile='model'"]),
                write_run_dir=False).fit().summary
    assert s["compile"] == "model"


def test_fp16_with_the_checkpoint_guard_skipping_a_spike_keeps_training(tmp_path):
    """precision=fp16 + checkpoint.spike_action=skip: the guard skipped a step after the clip had unscaled the
    gradients, the scaler never ended that step, and the next step died with GradScaler's 'unscale_() has already
    been called on this optimizer since the last update()' traceback."""
    cfg = load_config(overrides=TINY + ["train.precision='fp16'", "train.steps=40", "checkpoint.enabled=true",
                                        "checkpoint.spike_threshold=1.01", "checkpoint.spike_action='skip'"])
    s = Trainer(config=cfg, out=tmp_path / "run").fit().summary
    assert s["steps"] == 40 and s["skipped_steps"] > 0
    assert s["loss_scale"] is not None and s["final_train_loss"] == pytest.approx(s["final_train_loss"])  # finite


def test_adamw_triton_compiled_step_under_the_interpreter_is_refused_up_front(monkeypatch):
    """TRITON_INTERPRET=1 + optim.name=adamw_triton + compile=model+optimizer: dynamo traced the interpreter's step
    and died at the first step (26 warning lines, then a TorchRuntimeError traceback); now a ConfigError."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytest.importorskip("triton")
    cfg = load_config(overrides=TINY + ["optim.name='adamw_triton'", "train.compile='model+optimizer'"])
    with pytest.raises(ConfigError, match=r"`optim.name` = 'adamw_triton' under TRITON_INTERPRET=1"):
        Trainer(config=cfg, write_run_dir=False)
    Trainer(config=load_config(overrides=TINY + ["optim.name='adamw_triton'", "train.compile='model'"]),
            write_run_dir=False)
