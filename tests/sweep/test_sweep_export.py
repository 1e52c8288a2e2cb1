"""A packed point exported mid-run is an ordinary checkpoint: `stride train` resumes it and continues exactly."""

from __future__ import annotations

import copy

import pytest
from sweep_fixtures import FP32_TOL, config, max_param_diff, solo

from stride.sweep.export import export_checkpoint
from stride.sweep.packed_train import PackedTrainer
from stride.train.trainer import Trainer


@pytest.mark.parametrize("workload", ["mlp", "lstm"])
def test_export_at_step_4_then_stride_train_continues_like_the_pack_and_like_solo(workload, tmp_path):
    cfgs = [config(workload, "train.seed=0"), config(workload, "train.seed=1", "optim.lr=3e-3")]
    pt = PackedTrainer(cfgs)
    pt.fit(until=4)
    folder = export_checkpoint(cfgs[1], pt.model_state(1), tmp_path / "run", log=lambda m: None)
    assert folder.name == "step_00000004"
    pt.fit()  # the pack goes on to step 8
    resumed_cfg = copy.deepcopy(cfgs[1])
    resumed_cfg.checkpoint.enabled = True
    resumed = Trainer(config=resumed_cfg, out=tmp_path / "run")
    summary = resumed.fit().summary
    assert summary["checkpoint"]["resumed_from"] == "step_00000004" and summary["steps"] == 8
    packed_final = pt.model.state_dict_of(1)
    assert max_param_diff(resumed.model.state_dict(), packed_final) < FP32_TOL
    assert max_param_diff(resumed.model.state_dict(), solo(cfgs[1]).model.state_dict()) < FP32_TOL
    # the resumed run logged steps 5..8 as the uninterrupted pack did
    packed_log = [h for h in pt.records[1].history if h["step"] > 4 and "loss" in h]
    resumed_log = [h for h in resumed.history if "loss" in h]
    assert [h["step"] for h in resumed_log] == [h["step"] for h in packed_log]
    for a, b in zip(resumed_log, packed_log, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4) and a["lr"] == pytest.approx(b["lr"], rel=1e-12)


def test_an_exported_sgd_point_resumes_too(tmp_path):
    cfgs = [config("mlp", "optim.name=sgd", "optim.lr=0.05", f"train.seed={s}") for s in (0, 1)]
    pt = PackedTrainer(cfgs)
    pt.fit(until=3)
    export_checkpoint(cfgs[0], pt.model_state(0), tmp_path / "run", log=lambda m: None)
    pt.fit()
    c = copy.deepcopy(cfgs[0])
    c.checkpoint.enabled = True
    resumed = Trainer(config=c, out=tmp_path / "run")
    resumed.fit()
    assert max_param_diff(resumed.model.state_dict(), pt.model.state_dict_of(0)) < FP32_TOL
