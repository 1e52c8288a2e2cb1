"""`[metrics]` keys that change what a packed point records split packing classes; trackers are not packed
(audit 10, F9).

Before: `[metrics]` was left out of the packing class whole, so `--grid metrics.log_every=2,5 --pack 2` logged
both points at steps 2, 4, ..., the first point's `log_every`, and `metrics.mlflow` / `metrics.wandb` points were
packed (no tracker run) where tensorboard and prometheus were refused.
"""

from __future__ import annotations

import json

import pytest
from sweep_fixtures import config as run_config

from stride.cli.main import main
from stride.config.errors import ConfigError
from stride.sweep.packing import check_packable, pack_key, split_keys


def test_log_every_and_skip_steps_split_and_the_rest_of_metrics_does_not():
    base = run_config("mlp")
    assert pack_key(run_config("mlp", "metrics.log_every=5")) != pack_key(base)
    assert pack_key(run_config("mlp", "metrics.skip_steps=1")) != pack_key(base)
    assert pack_key(run_config("mlp", "metrics.progress=true", "metrics.out_dir=elsewhere")) == pack_key(base)
    assert split_keys([base, run_config("mlp", "metrics.log_every=5")]) == ["metrics.log_every"]


@pytest.mark.parametrize("tracker", ["mlflow", "wandb", "tensorboard", "prometheus"])
def test_every_tracker_is_refused_for_packing(tracker):
    with pytest.raises(ConfigError) as e:
        check_packable(run_config("mlp", f"metrics.{tracker}=true"))
    assert str(e.value) == (f"packed training does not support metrics trackers (metrics.{tracker}: each point would "
                            "be a run of its own there); train such points one by one (--pack 1)")


def test_each_point_logs_at_its_own_log_every(config, tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", str(config), "--set", "train.steps=10", "--set", "train.val_every=0", "--grid",
                 "metrics.log_every=2,5", "--grid", "train.seed=0,1", "--pack", "2", "--out", str(out)]) == 0
    assert "2 packing classes: the points differ in metrics.log_every" in capsys.readouterr().err
    logged = {}
    for p in (out / "points").glob("*.json"):
        obj = json.loads(p.read_text())
        assert obj["mode"] == "packed" and obj["pack"]["size"] == 2
        logged[obj["label"]] = [h["step"] for h in obj["history"] if "loss" in h]
    assert logged == {"metrics.log_every=2 train.seed=0": [2, 4, 6, 8, 10],
                      "metrics.log_every=2 train.seed=1": [2, 4, 6, 8, 10],
                      "metrics.log_every=5 train.seed=0": [5, 10],  # was 2, 4, ..., 10: the first point's
                      "metrics.log_every=5 train.seed=1": [5, 10]}
