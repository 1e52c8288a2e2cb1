"""Optimizer x layout: refusals before any rank starts, and notices where a setting does nothing.

1. adamw8bit / adafactor with FSDP2 or TP: every rank used to start, fail at set-up with a traceback, and suggest
   `optim.name = 'fused_adamw'`, which does not exist. Now the config is refused in one line (exit 2) before
   torchrun, naming optim.name and the parallel key, and suggesting only names that take DTensor parameters.
2. [parallel] keys that do nothing in the layout (mp_param_dtype, comm_hook on one process) were silently
   ignored; one notice line now names each.
3. adamw_triton on CPU fell back to torch with no word, and summary.json did not say what ran.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fault_helpers import Outcome, one_line_error, stride_cli, stride_main

from stride.config.schema import SHARDED_PARAM_OPTIMIZERS
from stride.optim.factory import OPTIMIZERS

QUICK = "configs/quickstart.toml"
TINY = ["--set", "train.steps=2", "--set", "train.val_every=0", "--set", "train.batch_size=16",
        "--set", "data.n_steps=1024", "--set", "metrics.flops=false", "--set", "train.threads=1", "--no-progress"]
SHARDED = [("parallel.dp_shard=2", "adamw8bit", "`parallel.dp_shard` = 2"),
           ("parallel.tp=2", "adafactor", "`parallel.tp` = 2")]


def _assert_refusal(res: Outcome, name: str, key: str) -> None:
    line = one_line_error(res, f"`optim.name` = {name!r}", key, codes=(2,))
    assert "fused_adamw" not in res.err and "ChildFailedError" not in res.err, res.err
    suggested = re.findall(r"'(\w+)'", line.split("one of ", 1)[1])
    assert suggested and set(suggested) <= set(SHARDED_PARAM_OPTIMIZERS) <= set(OPTIMIZERS), line


@pytest.mark.parametrize(("layout", "name", "key"), SHARDED)
def test_nproc_refuses_an_optimizer_that_needs_whole_parameters_before_launch(layout: str, name: str,
                                                                              key: str) -> None:
    res = stride_main("train", QUICK, "--nproc", "2", "--set", layout, "--set", f"optim.name={name}", *TINY)
    _assert_refusal(res, name, key)


@pytest.mark.parametrize(("layout", "name", "key"), SHARDED)
def test_a_rank_of_a_hand_run_torchrun_refuses_it_too(layout: str, name: str, key: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`torchrun -m stride train ...` (no --nproc): the rank refuses it before its process group."""
    for var, value in {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(var, value)
    res = stride_main("train", QUICK, "--set", layout, "--set", f"optim.name={name}", *TINY)
    _assert_refusal(res, name, key)


def test_one_process_names_the_parallel_keys_it_ignores(tmp_path: Path) -> None:
    res = stride_cli("train", QUICK, "--set", "parallel.mp_param_dtype=bf16", "--set", "parallel.comm_hook=powersgd",
                     *TINY, "--out", str(tmp_path / "run"))
    assert res.code == 0, res.err[-3000:]
    notices = [ln for ln in res.err.splitlines() if ln.startswith("stride.parallel:")]
    assert len(notices) == 1, res.err
    for words in ("no effect on this layout (single, 1 process)", '`parallel.mp_param_dtype` = "bf16"',
                  "FSDP2's sharded parameters", '`parallel.comm_hook` = "powersgd"', "DDP's gradient all-reduce"):
        assert words in notices[0], (words, notices[0])


@pytest.fixture(scope="module")
def adamw_triton_on_cpu(tmp_path_factory: pytest.TempPathFactory) -> tuple[Outcome, Path]:
    """One CPU run with optim.name = adamw_triton, as a user has it (the suite sets TRITON_INTERPRET=1)."""
    out = tmp_path_factory.mktemp("adamw_triton") / "run"
    res = stride_cli("train", QUICK, "--set", "optim.name=adamw_triton", *TINY, "--out", str(out),
                     env={"TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""})
    return res, out


def test_adamw_triton_without_a_gpu_says_it_runs_torch(adamw_triton_on_cpu: tuple[Outcome, Path]) -> None:
    res, _ = adamw_triton_on_cpu
    assert res.code == 0, res.err[-3000:]
    notices = [ln for ln in res.err.splitlines() if "optim.name='adamw_triton'" in ln]
    assert len(notices) == 1, res.err
    assert notices[0].startswith("stride.optim: ") and "using the torch AdamW path instead" in notices[0]


def test_summary_records_the_optimizer_implementation_that_ran(adamw_triton_on_cpu: tuple[Outcome, Path]) -> None:
    res, out = adamw_triton_on_cpu
    assert res.code == 0, res.err[-3000:]
    assert json.loads((out / "summary.json").read_text())["optimizer_impl"] == "torch"
