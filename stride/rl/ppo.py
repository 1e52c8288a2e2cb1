"""PPO (Schulman et al., 2017) on the vectorised market-making environment, measured like the trainer.

Each update is one "step" of the step-time breakdown: `rollout` (policy inference and environment,
no grad), then per minibatch `forward`, `backward`, `optimizer`. Throughput is environment
timesteps per second. MFU counts an update's model FLOPs: the rollout's policy forwards and the minibatches'
forward and backward (`update_flops`), over the whole update's time, against the peak of the dtype the matmuls run
in (`compute_precision`): the policy's parameters', as no autocast wraps this loop, whatever `train.precision` says.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from stride.config.dtypes import PRECISION_DTYPES
from stride.config.schema import RunConfig
from stride.metrics.flops import MODEL_FLOP_FORMULAS, count_train_flops
from stride.metrics.hashing import params_sha256
from stride.metrics.memory import peak_memory, reset_peak
from stride.metrics.peak import device_peak, mfu_fields
from stride.metrics.step_timer import StepTimer
from stride.rl.market_env import MarketMakingEnv, MarketMakingSpec
from stride.train.device import configure_process, resolve_device


class ActorCritic(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, width: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh())
        self.pi = nn.Linear(width, n_actions)
        self.v = nn.Linear(width, 1)
        nn.init.zeros_(self.pi.weight)  # start from the uniform policy
        nn.init.zeros_(self.pi.bias)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


@dataclass
class PPOSettings:
    updates: int = 20
    rollout_steps: int = 64
    epochs: int = 4
    minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    lr: float = 3e-3
    width: int = 64


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
        gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and returns; inputs are [T, N]."""
    adv = torch.zeros_like(rewards)
    running = torch.zeros_like(last_value)
    for t in range(rewards.shape[0] - 1, -1, -1):
        nxt = last_value if t == rewards.shape[0] - 1 else values[t + 1]
        alive = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * nxt * alive - values[t]
        running = delta + gamma * lam * alive * running
        adv[t] = running
    return adv, adv + values


def ppo_loss(model: ActorCritic, obs, actions, old_logp, adv, returns, s: PPOSettings) -> torch.Tensor:
    return ppo_objective(model(obs), actions, old_logp, adv, returns, s)


def ppo_objective(out: tuple[torch.Tensor, torch.Tensor], actions, old_logp, adv, returns,
                  s: PPOSettings) -> torch.Tensor:
    """The clipped PPO loss of the policy's output `out` = (logits, value) for a minibatch."""
    logits, value = out
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, actions[:, None]).squeeze(-1)
    ratio = torch.exp(logp - old_logp)
    pg = -torch.min(ratio * adv, ratio.clamp(1 - s.clip, 1 + s.clip) * adv).mean()
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    return pg + s.vf_coef * F.mse_loss(value, returns) - s.ent_coef * entropy


def update_flops(model: ActorCritic, obs: torch.Tensor, o: torch.Tensor, rest: tuple[torch.Tensor, ...],
                 s: PPOSettings, steps: int) -> dict[str, int]:
    """An update's model FLOPs, counted once: {"rollout": ..., "train": ...}.

    train: forward + backward of the PPO loss on one minibatch `o` (with its actions, log-probs, advantages and
    returns `rest`), x epochs x minibatches. The loss reads the forward `count_train_flops` runs (before, a loss that
    ran the policy again counted two forwards and one backward: +34 %, outside audit 13, M1).
    rollout: the policy's forward on the `n` observations `obs` of one environment step, x (`steps` + 1) (each step's
    action and the bootstrap value after the last). Counted toward MFU: the rollout's time is in the step time MFU
    divides by, so its FLOPs are in the numerator too (sampling, the environment and GAE are not matmuls: ~0 FLOPs).
    """
    train = count_train_flops(model, lambda out, _y: ppo_objective(out, *rest, s), o, None) * s.epochs * s.minibatches
    counter = FlopCounterMode(display=False, custom_mapping=MODEL_FLOP_FORMULAS)
    with counter, torch.no_grad():
        model(obs)
    return {"rollout": int(counter.get_total_flops()) * (steps + 1), "train": train}


def compute_precision(model: nn.Module) -> str:
    """The dtype PPO's matmuls run in, named as `train.precision` names one: its parameters' (the loop runs no
    autocast). MFU's peak was `train.precision`'s: a bf16 setting divided fp32 matmuls by the bf16 peak (16x the fp32
    one on an AMX CPU: 0.006 % MFU for 0.55 %), where the trainer divides by the precision its matmuls run in."""
    dtype = next(model.parameters()).dtype
    return next(name for name, dt in PRECISION_DTYPES.items() if dt == dtype)


def train_ppo(cfg: RunConfig, spec: MarketMakingSpec, s: PPOSettings,
              after_update: Callable[[], None] | None = None) -> dict[str, Any]:
    """`after_update`: called after each update, off the clock (a bench sweep's stop check raises there)."""
    device = resolve_device(cfg.train.device)
    configure_process(cfg.train, device)
    env = MarketMakingEnv(spec, device, seed=cfg.train.seed)
    model = ActorCritic(env.obs_dim, env.n_actions, s.width).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, fused=True)
    timer = StepTimer(device)
    n, steps = spec.n_envs, s.rollout_steps
    mb = n * steps // s.minibatches
    obs = env.reset()
    returns_log: list[float] = []
    update_times: list[float] = []
    flops_per_update = None
    flops_parts: dict[str, int] | None = None
    reset_peak(device)
    t0 = time.perf_counter()
    for update in range(s.updates):
        timer.start_step()
        buf_obs = torch.empty((steps, n, env.obs_dim), device=device)
        buf_act = torch.empty((steps, n), dtype=torch.long, device=device)
        buf_logp, buf_val, buf_rew = (torch.empty((steps, n), device=device) for _ in range(3))
        buf_done = torch.empty((steps, n), dtype=torch.bool, device=device)
        finished = []
        with torch.no_grad():
            for t in range(steps):
                logits, value = model(obs)
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
                buf_obs[t], buf_act[t], buf_logp[t], buf_val[t] = obs, action, dist.log_prob(action), value
                obs, reward, done, fin = env.step(action)
                buf_rew[t], buf_done[t] = reward, done
                finished.append(fin)
            last_value = model(obs)[1]
            adv, ret = gae(buf_rew, buf_val, buf_done, last_value, s.gamma, s.gae_lambda)
        timer.mark("rollout")
        fin_all = torch.stack(finished)
        done_returns = fin_all[~torch.isnan(fin_all)]
        if done_returns.numel():
            returns_log.append(float(done_returns.mean()))
        flat = [x.reshape(steps * n, *x.shape[2:]) for x in (buf_obs, buf_act, buf_logp, adv, ret)]
        flat[3] = (flat[3] - flat[3].mean()) / (flat[3].std() + 1e-8)
        for _ in range(s.epochs):
            perm = torch.randperm(steps * n, device=device)
            for i in range(s.minibatches):
                idx = perm[i * mb : (i + 1) * mb]
                o, a, lp, ad, rt = (x[idx] for x in flat)
                if flops_per_update is None:
                    flops_parts = update_flops(model, obs, o, (a, lp, ad, rt), s, steps)
                    flops_per_update = sum(flops_parts.values())
                loss = ppo_loss(model, o, a, lp, ad, rt, s)
                timer.mark("forward")
                loss.backward()
                timer.mark("backward")
                nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
                opt.step()
                opt.zero_grad(set_to_none=True)
                timer.mark("optimizer")
        update_times.append(timer.end_step(record=update > 0 or s.updates == 1)["total"])
        if after_update is not None:
            after_update()
    wall = time.perf_counter() - t0
    b = timer.mean()
    env_steps_per_s = n * steps / b["total"] if b["total"] else None
    mem, kind = peak_memory(device)
    compute = compute_precision(model)
    peak = device_peak(device, compute, cfg.metrics.peak_flops)
    achieved = flops_per_update / b["total"] if flops_per_update and b["total"] else None
    return {
        "steps": s.updates,
        "env_steps_per_s": env_steps_per_s,
        "episode_returns": returns_log,
        "final_episode_return": returns_log[-1] if returns_log else None,
        "step_time_s": b["total"],
        "step_time_breakdown_s": {k: v for k, v in b.items() if k != "total"},
        "flops_per_step": flops_per_update,  # an update's model FLOPs: rollout forwards + training (update_flops)
        "flops_per_step_parts": flops_parts,
        "achieved_flops_per_s": achieved,
        **mfu_fields(achieved, peak, lambda: device_peak(device, compute, cfg.metrics.peak_flops, fresh=True)),
        "precision": cfg.train.precision,
        "compute_precision": compute,  # the matmuls' dtype, MFU's peak (as the trainer's summary names it)
        "peak_mem_bytes": mem,
        "peak_mem_kind": kind,
        "wall_time_s": wall,
        "params_sha256": params_sha256(model),
        "update_times_s": update_times,
        "env_steps_per_update": n * steps,
    }
