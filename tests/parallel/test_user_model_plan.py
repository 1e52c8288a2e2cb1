"""A `module:factory` model that declares its parallel plan gets tensor and pipeline parallelism:
2-rank TP and 2-rank PP runs of tests/parallel/user_model.py train like one process."""

from __future__ import annotations

import json

import pytest
import torch
from user_model import LAYOUTS, USER, train

from stride.config import ConfigError, load_config
from stride.parallel.layout import check_layout


def test_the_declared_plan_is_checked_before_any_process_group() -> None:
    from stride.launch.preflight import model_for_checks

    cfg = load_config(overrides=[*USER, "parallel.tp=2"])  # sequence parallel is on by default
    model = model_for_checks(cfg)
    with pytest.raises(ConfigError, match="user_model runs tensor parallel without sequence parallel"):
        check_layout(cfg, model, 2, 16)
    cfg = load_config(overrides=[*USER, "parallel.tp=3", "parallel.sequence_parallel=false", "train.batch_size=9"])
    with pytest.raises(ConfigError, match="user_model's hidden size 32 is not divisible by `parallel.tp` = 3"):
        check_layout(cfg, model_for_checks(cfg), 3, 16)
    cfg = load_config(overrides=[*USER, "parallel.pp=3"])
    with pytest.raises(ConfigError, match="3 pipeline stages, but the model has only 2 layers"):
        check_layout(cfg, model_for_checks(cfg), 3, 16)


# trained under torchrun by user_model.py, in the launches this package's modules share (conftest.py)
TORCHRUN_PART, TORCHRUN_RUNS = "user_model", {2: list(LAYOUTS)}


@pytest.mark.dist
@pytest.mark.slow
def test_user_model_trains_under_tp_and_pp_like_one_process(torchrun_runs) -> None:
    runs = torchrun_runs.folder(TORCHRUN_PART)
    threads = torch.get_num_threads()
    try:
        ref_losses, ref_params, _ = train([])
    finally:
        torch.set_num_threads(threads)
    for name, strategy in (("tp", "tp"), ("pp", "pp")):
        result = json.loads((runs / f"{name}.json").read_text())
        params = torch.load(runs / f"{name}.pt")
        assert result["parallel"] == strategy and result["world_size"] == 2
        assert set(params) == set(ref_params), f"{name}: parameter names differ from one process"
        loss_diff = max(abs(a - b) for a, b in zip(result["losses"], ref_losses, strict=True))
        param_diff = max(float((params[k] - ref_params[k]).abs().max()) for k in ref_params)
        print(f"{name}: largest |loss diff| {loss_diff:.3g}, largest |param diff| {param_diff:.3g}")
        assert len(result["losses"]) == 6 and loss_diff < 2e-6, (name, loss_diff)
        assert param_diff < 2e-5, (name, param_diff)
    assert json.loads((runs / "pp.json").read_text())["pipeline"]["layers_per_stage"] == [1, 1]
