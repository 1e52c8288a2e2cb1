"""The market-making environment's dynamics by hand, GAE against its definition, and PPO learning."""

from __future__ import annotations

import math

import pytest
import torch

from stride.config import load_config
from stride.rl.market_env import MarketMakingEnv, MarketMakingSpec
from stride.rl.ppo import PPOSettings, gae, train_ppo


def test_fill_rate_matches_intensity() -> None:
    spec = MarketMakingSpec(n_envs=20000, episode_len=1000, max_inventory=10**6)
    env = MarketMakingEnv(spec, torch.device("cpu"), seed=0)
    env.reset()
    action = torch.full((spec.n_envs,), 1 * len(spec.offsets) + 3)  # bid offset 0.5, ask offset 2.0
    inv0 = env.inv.clone()
    env.step(action)
    p_bid = 1 - math.exp(-spec.fill_a * math.exp(-spec.fill_k * 0.5) * spec.dt)
    p_ask = 1 - math.exp(-spec.fill_a * math.exp(-spec.fill_k * 2.0) * spec.dt)
    # E[change in inventory] = p_bid - p_ask; 20k envs give a standard error below 0.007
    assert (env.inv - inv0).mean().item() == pytest.approx(p_bid - p_ask, abs=0.025)


def test_reward_is_wealth_change_minus_penalty() -> None:
    spec = MarketMakingSpec(n_envs=64)
    env = MarketMakingEnv(spec, torch.device("cpu"), seed=1)
    env.reset()
    for _ in range(5):
        w0 = env.cash + env.inv * env.mid
        _, r, _, _ = env.step(torch.randint(0, env.n_actions, (64,)))
        w1 = env.cash + env.inv * env.mid
        assert torch.allclose(r, w1 - w0 - spec.inventory_penalty * env.inv.pow(2) * spec.dt, atol=1e-4)


def test_episodes_reset_and_are_seeded() -> None:
    spec = MarketMakingSpec(n_envs=8, episode_len=3)
    a, b = (MarketMakingEnv(spec, torch.device("cpu"), seed=7) for _ in range(2))
    a.reset(), b.reset()
    act = torch.zeros(8, dtype=torch.long)
    for _ in range(3):
        oa, ra, da, fa = a.step(act)
        ob, rb, _, _ = b.step(act)
        assert torch.equal(oa, ob) and torch.equal(ra, rb)
    assert bool(da.all()) and not torch.isnan(fa).any() and bool((a.t == 0).all()) and bool((a.inv == 0).all())


def test_gae_against_definition() -> None:
    torch.manual_seed(0)
    r, v = torch.randn(5, 2), torch.randn(5, 2)
    d = torch.zeros(5, 2, dtype=torch.bool)
    d[2, 1] = True
    last = torch.randn(2)
    g, lam = 0.9, 0.8
    adv, ret = gae(r, v, d, last, g, lam)
    for n in range(2):
        for t in range(5):
            # A_t = sum_l (g lam)^l delta_{t+l}, truncated at the first done
            total, scale = 0.0, 1.0
            for u in range(t, 5):
                nxt = last[n] if u == 4 else v[u + 1, n]
                alive = 0.0 if d[u, n] else 1.0
                total += scale * (r[u, n] + g * nxt * alive - v[u, n])
                if not alive:
                    break
                scale *= g * lam
            assert adv[t, n].item() == pytest.approx(float(total), abs=1e-5)
    assert torch.allclose(ret, adv + v)


@pytest.mark.slow
def test_ppo_improves_episode_return() -> None:
    cfg = load_config(overrides=["train.threads=1"])
    r = train_ppo(cfg, MarketMakingSpec(n_envs=128, episode_len=32), PPOSettings(updates=12, rollout_steps=32))
    first, last = r["episode_returns"][:3], r["episode_returns"][-3:]
    assert sum(last) / 3 > sum(first) / 3 + 1.0, r["episode_returns"]
    assert r["env_steps_per_s"] > 0 and r["flops_per_step"] > 0


def test_ppo_flops_count_one_forward_per_backward_and_the_rollout() -> None:
    """Outside audit 13, M1: the minibatch count ran the policy twice (count_train_flops' forward, then the loss's own)
    for one backward, +34 %. An update is the rollout's forwards plus epochs x minibatches of forward + backward."""
    from torch.utils.flop_counter import FlopCounterMode

    from stride.rl.ppo import ActorCritic, ppo_loss

    spec, s = MarketMakingSpec(n_envs=16, episode_len=8), PPOSettings(updates=2, rollout_steps=8, epochs=3,
                                                                        minibatches=2, width=16)
    r = train_ppo(load_config(overrides=["train.threads=1"]), spec, s)
    env = MarketMakingEnv(spec, torch.device("cpu"), seed=0)
    d, w, a = env.obs_dim, s.width, env.n_actions
    fwd = 2 * (d * w + w * w + w * a + w)  # per sample: body (2 linears), policy and value heads, 2 FLOPs a MAC
    train = 3 * fwd - 2 * d * w  # backward: weight and input gradients, except the observations' (no grad)
    samples = spec.n_envs * s.rollout_steps
    by_hand = {"rollout": fwd * spec.n_envs * (s.rollout_steps + 1), "train": train * samples * s.epochs}
    assert r["flops_per_step_parts"] == by_hand
    assert r["flops_per_step"] == by_hand["rollout"] + by_hand["train"]
    # the same minibatch counted by torch around the loss PPO trains with, on a fresh policy of the same shape
    mb = samples // s.minibatches
    m = ActorCritic(d, a, w)
    batch = (torch.randn(mb, d), torch.randint(0, a, (mb,)), torch.randn(mb), torch.randn(mb), torch.randn(mb))
    with FlopCounterMode(display=False) as fc:
        ppo_loss(m, *batch, s).backward()
    assert fc.get_total_flops() * s.epochs * s.minibatches == by_hand["train"]
    assert r["achieved_flops_per_s"] == pytest.approx(r["flops_per_step"] / r["step_time_s"])
