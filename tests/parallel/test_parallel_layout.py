"""An impossible [parallel] layout is a ConfigError before any process group exists."""

from __future__ import annotations

import copy

import pytest
import torch.distributed as dist
from torch import nn

from stride.config import ConfigError, load_config
from stride.models.transformer import TimeSeriesTransformer, TokenLM
from stride.parallel.comm_hooks import CommTimer
from stride.parallel.layout import Layout, check_model, resolve_layout
from stride.train.trainer import Trainer

BASE = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.n_assets=4", "data.n_steps=600",
        "data.seq_len=16", "train.batch_size=8", "train.threads=1", "metrics.progress=false"]


def _trainer(monkeypatch, world: int, *overrides: str) -> Trainer:
    monkeypatch.setenv("WORLD_SIZE", str(world))
    return Trainer(config=load_config(overrides=BASE + list(overrides)), write_run_dir=False)


@pytest.mark.parametrize(
    ("world", "overrides", "message"),
    [
        (4, ["parallel.dp_shard=3"], "multiply to 3, but the world size is 4"),
        (3, ["parallel.tp=3"], "`model.n_heads` = 4 is not divisible by `parallel.tp` = 3"),
        (4, ["parallel.pp=4"], "makes 4 pipeline stages, but the model has only 2 layers"),
        (2, ["parallel.dp_shard=2", "train.batch_size=6", "train.grad_accum=2"], "multiple of 4"),
        (4, ["parallel.dp_replicate=2", "parallel.tp=2"], "DDP does not take tensor-parallel"),
        (2, ["parallel.tp=2", "data.seq_len=15"], "sequence parallel splits the 15 tokens"),
        # fp16's scaler unscaled DTensor and plain grads in one foreach call: a traceback at the first step
        (2, ["parallel.tp=2", "train.precision='fp16'"], "`train.precision` = 'fp16' with `parallel.tp` = 2"),
        (4, ["parallel.tp=2", "parallel.dp_shard=2", "train.precision='fp16'"], "fp16' with `parallel.tp` = 2"),
        # FSDP computing in fp16 without the loss scaler: small gradients flushed to zero, and nothing said
        (2, ["parallel.dp_shard=2", "parallel.mp_param_dtype='fp16'"], "`parallel.mp_param_dtype` = 'fp16' with"),
        (2, ["parallel.dp_shard=2", "parallel.mp_param_dtype='fp16'", "train.precision='bf16'"], "mp_param_dtype"),
    ],
)
def test_impossible_layout_fails_before_process_groups(monkeypatch, world, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        _trainer(monkeypatch, world, *overrides)
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    ("world", "overrides", "fix", "fixed"),
    [
        # each refusal named the key and the value, but left the fix to the reader (outside audit of the layouts)
        (3, ["parallel.tp=3", "model.d_model=48", "model.n_heads=3", "data.seq_len=15"],
         "the MLP hidden size 128 (block 0) is not divisible by `parallel.tp` = 3: it is `model.ffn_mult` x "
         "`model.d_model` rounded to a multiple of 8; set `model.ffn_mult` = 2.5 (hidden size a multiple of 3), or "
         "`parallel.tp` to one that divides it (2, 4, 8, 16, 32, 64, ...)", ["model.ffn_mult=2.5"]),
        (2, ["parallel.tp=2", "model.d_model=48", "model.n_heads=3"],
         "`model.n_heads` = 3 is not divisible by `parallel.tp` = 2: set `parallel.tp` to one that divides it (3), "
         "or `model.n_heads` to a multiple of 2", ["model.n_heads=4"]),
        (2, ["parallel.pp=2", "parallel.microbatches=3"],
         "= 3 equal microbatches: set `parallel.microbatches` to one that divides 8 (1, 2, 4, 8), or make "
         "`train.batch_size` a multiple of 3 x the data-parallel degree", ["parallel.microbatches=4"]),
        (2, ["parallel.pp=2", "parallel.microbatches=1"],
         "`parallel.microbatches` = 1: set `parallel.microbatches` to 2 or 4 or 8 (>= 2, dividing the batch)",
         ["parallel.microbatches=2"]),
        (2, ["parallel.pp=2", "parallel.pp_schedule='zbv'", "parallel.microbatches=2", "model.n_layers=4"],
         "`parallel.microbatches` = 2: set `parallel.microbatches` to 4 or 8 (>= 3, dividing the batch)",
         ["parallel.microbatches=4"]),
        (2, ["parallel.pp=2", "parallel.pp_schedule='zbv'", "parallel.microbatches=1", "model.n_layers=4",
             "train.grad_accum=2"],
         "`parallel.microbatches` = 2: set `parallel.microbatches` to 2 or 4 (>= 2, dividing the batch)",
         ["parallel.microbatches=2"]),
    ],
)
def test_an_impossible_layout_names_its_fix(monkeypatch, world, overrides, fix, fixed):
    """A refusal names the key, the value and what to set instead; the first value it names passes the checks."""
    from stride.launch.preflight import check_before_launch

    with pytest.raises(ConfigError) as err:
        _trainer(monkeypatch, world, *overrides)
    assert fix in str(err.value), str(err.value)
    assert not dist.is_initialized()
    check_before_launch(load_config(overrides=BASE + overrides + fixed), world)


def test_a_batch_that_grad_accum_does_not_split_names_the_data_parallel_multiple():
    """`--nproc 2` with batch 16 and grad_accum 3 was told "try batch_size = 15", which 2 ranks then refused (15 is no
    multiple of 2 x 3): the config check cannot know the world size, so it says what the multiple is under it."""
    with pytest.raises(ConfigError, match=r"try batch_size = 15; under data parallelism a multiple of 3 x the "
                                          r"data-parallel degree"):
        load_config(overrides=["train.batch_size=16", "train.grad_accum=3"])


def test_all_ones_under_a_launcher_means_ddp():
    layout = resolve_layout(load_config().parallel, 4)
    assert (layout.dp_replicate, layout.dp, layout.strategy) == (4, 4, "ddp")
    assert resolve_layout(load_config(overrides=["parallel.dp_shard=2", "parallel.tp=2"]).parallel, 4).strategy \
        == "fsdp+tp"


def test_bad_parallel_values_name_the_key():
    with pytest.raises(ConfigError, match="parallel.comm_hook"):
        load_config(overrides=["parallel.comm_hook='int8'"])
    with pytest.raises(ConfigError, match="DDP hook but `parallel.dp_shard` = 2"):
        load_config(overrides=["parallel.comm_hook='fp16'", "parallel.dp_shard=2"])


def test_comm_timer_splits_exposed_from_hidden():
    timer = CommTimer()
    # buckets launched at 0.0 and 1.0 (compute ends at 1.0); they finish at 0.5 and 1.3
    timer.spans = [[0.0, 0.5], [1.0, 1.3]]
    exposed, hidden = timer.split()
    assert exposed == pytest.approx(0.3) and hidden == pytest.approx(0.5)
    # an early bucket still running after the last launch: overlap counted once
    timer.spans = [[0.0, 1.2], [1.0, 1.5]]
    exposed, hidden = timer.split()
    assert exposed == pytest.approx(0.5) and hidden == pytest.approx(1.0)


def _tp_layout(tp: int = 2) -> Layout:
    return Layout(world_size=tp, dp_replicate=1, dp_shard=1, tp=tp, pp=1)


def test_tp_checks_that_attention_splits_by_heads():
    """The plan splits wq, wk, wv by rows: refused (before any process group) where that is not by heads."""
    model = TimeSeriesTransformer(3, 16, 2, d_model=32, n_layers=2, n_heads=4)
    check_model(_tp_layout(), model, 16, True)  # the stride model passes
    check_model(_tp_layout(), TokenLM(16, 16, d_model=32, n_layers=2, n_heads=4), 16, True)
    fused = copy.deepcopy(model)
    for blk in fused.blocks:  # a fused qkv projection, as stride had before head-parallel TP
        del blk.attn.wq, blk.attn.wk, blk.attn.wv
        blk.attn.wqkv = nn.Linear(32, 96, bias=False)
    with pytest.raises(ConfigError, match=r"block 0 \(TransformerBlock\) has no attn.wq, attn.wk, attn.wv, which "):
        check_model(_tp_layout(), fused, 16, True)
    grouped = copy.deepcopy(model)
    grouped.blocks[1].attn.wk = nn.Linear(32, 16, bias=False)  # fewer k heads than q heads
    with pytest.raises(ConfigError, match=r"block 1's attention projections have \{'wq': 32, 'wk': 16, 'wv': 32\}"):
        check_model(_tp_layout(), grouped, 16, True)


def test_sequence_parallel_needs_the_models_entry_and_final_norm():
    model = TimeSeriesTransformer(3, 16, 2, d_model=32, n_layers=2, n_heads=4)
    model.inp = model.embed
    del model.embed
    with pytest.raises(ConfigError, match="TimeSeriesTransformer has no embed, which its tensor-parallel plan names; "
                                         "set `parallel.sequence_parallel` = false"):
        check_model(_tp_layout(), model, 16, True)
    check_model(_tp_layout(), model, 16, False)  # without SP only the blocks are addressed


def test_tp_with_fp16_is_refused_before_the_launch(tmp_path):
    """`stride train --nproc 2` with tp=2 and fp16: one config-error line naming both keys, exit 2, no rank started
    (it was a rank's RuntimeError traceback from GradScaler.unscale_ at the first step)."""
    import subprocess
    import sys

    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    r = subprocess.run([sys.executable, "-m", "stride", "train", str(cfg), "--nproc", "2", "--out", str(tmp_path / "r"),
                        *[a for o in BASE + ["parallel.tp=2", "train.precision='fp16'", "train.steps=2"]
                          for a in ("--set", o)]], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "train.precision" in lines[0] and "parallel.tp" in lines[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_compute_precision_is_fsdp_mixed_precision_under_fp32_autocast():
    """FSDP2 with mp_param_dtype computes in it: MFU's peak and summary.json `compute_precision` say that dtype
    (the summary said precision fp32 and divided by the fp32 peak while the matmuls ran in bf16)."""
    from stride.parallel.layout import compute_precision

    fsdp = Layout(world_size=2, dp_replicate=1, dp_shard=2, tp=1, pp=1)
    ddp = Layout(world_size=2, dp_replicate=2, dp_shard=1, tp=1, pp=1)
    assert compute_precision("fp32", fsdp, "bf16") == "bf16"
    assert compute_precision("fp32", fsdp, "none") == "fp32"
    assert compute_precision("bf16", fsdp, "fp16") == "bf16"  # autocast's dtype wins
    assert compute_precision("fp32", ddp, "bf16") == "fp32"  # not FSDP: the key is unused (and said so)
    assert compute_precision("fp32", None, "bf16") == "fp32"


# trained under torchrun by summary_worker.py, in the 2-rank launch this package's modules share (conftest.py): a
# `stride train --nproc 2` of its own cost this test a launch (and ran 2 ranks beside the dist group: it was not
# marked dist)
TORCHRUN_PART, TORCHRUN_RUNS = "layout", {2: ["fsdp_bf16"]}


@pytest.mark.dist
def test_fsdp_bf16_mixed_precision_run_reports_its_compute_dtype(torchrun_runs):
    import json

    s = json.loads((torchrun_runs.folder(TORCHRUN_PART) / "fsdp_bf16.json").read_text())
    assert s["world_size"] == 2 and s["parallel"] == "fsdp"
    assert (s["precision"], s["compute_precision"]) == ("fp32", "bf16")
    assert ":bf16" in s["peak_flops_source"] or s["peak_flops_source"].startswith("config:"), s["peak_flops_source"]
