"""PPO's MFU divides by the peak of the dtype its matmuls run in (outside review): it took `train.precision`'s, but
no autocast wraps PPO's loop, so with train.precision = bf16 its fp32 matmuls were divided by the bf16 peak (16x the
fp32 one on an AMX CPU: 0.006 % MFU for 0.56 %). The trainer divides by `compute_precision`'s peak; PPO now too."""

from __future__ import annotations

import pytest
import torch

from stride.config import load_config
from stride.metrics.peak import device_peak
from stride.rl.market_env import MarketMakingSpec
from stride.rl.ppo import PPOSettings, train_ppo

SPEC, SETTINGS = MarketMakingSpec(n_envs=16, episode_len=8), PPOSettings(updates=2, rollout_steps=8, epochs=1,
                                                                          minibatches=2, width=16)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_ppo_mfu_is_over_the_peak_of_the_dtype_its_matmuls_run_in(precision: str) -> None:
    r = train_ppo(load_config(overrides=["train.threads=1", f"train.precision={precision}"]), SPEC, SETTINGS)
    fp32 = device_peak(torch.device("cpu"), "fp32")  # the policy's parameters are fp32; nothing casts them
    assert r["peak_flops_per_s"] == pytest.approx(fp32.flops_per_s, rel=0.05)  # a CPU's clock is measured again
    assert ":fp32:" in r["peak_flops_source"]
    assert r["compute_precision"] == "fp32" and r["precision"] == precision
    assert r["mfu"] == pytest.approx(r["achieved_flops_per_s"] / r["peak_flops_per_s"])
