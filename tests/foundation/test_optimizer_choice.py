"""Every optimizer name in the config trains the default workload; state sizes are what each promises."""

from __future__ import annotations

import pytest
from helpers import small_config

from stride.config import ConfigError
from stride.optim.state import optimizer_state_bytes
from stride.train.trainer import Trainer


@pytest.mark.parametrize("name", ["adamw", "sgd", "adamw_triton", "adamw8bit", "adafactor"])
def test_optimizer_by_name_trains(name: str) -> None:
    t = Trainer(config=small_config(optim__name=name, train__steps=3), write_run_dir=False)
    r = t.fit()
    assert r.summary["steps"] == 3 and r.summary["final_train_loss"] < 10
    per_param = optimizer_state_bytes(t.optimizer) / r.summary["params"]
    expected = {"adamw": 8, "sgd": 4, "adamw_triton": 8}
    if name in expected:
        assert per_param == pytest.approx(expected[name], rel=0.01)
    else:
        assert per_param < 4.5  # 8-bit moments (~2 B, small tensors stay fp32) / factored moments


def test_adamw_triton_torch_path_equals_torch_adamw() -> None:
    ta = Trainer(config=small_config(optim__name="adamw", train__steps=4), write_run_dir=False)
    tb = Trainer(config=small_config(optim__name="adamw_triton", train__steps=4), write_run_dir=False)
    a, b = ta.fit().summary, tb.fit().summary
    assert a["final_train_loss"] == pytest.approx(b["final_train_loss"], rel=1e-5)


def test_unknown_optimizer_is_clear() -> None:
    with pytest.raises(ConfigError, match="did you mean `adamw8bit`"):
        Trainer(config=small_config(optim__name="adamw8bits"), write_run_dir=False).fit()
