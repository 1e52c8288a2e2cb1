"""A vectorised market-making environment in torch, resident on the training device.

Every environment is a row of a few tensors, so one `step` advances thousands of markets with a
handful of kernels and the environment never becomes the bottleneck (no Python per env, no host
round trip on GPU). Dynamics follow Avellaneda & Stoikov (2008): the mid is a random walk, the agent
quotes a bid and an ask at chosen offsets, each side fills with probability 1 - exp(-A e^{-k d} dt),
and the reward is the change in marked-to-market wealth minus a running inventory penalty.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MarketMakingSpec:
    n_envs: int = 256
    episode_len: int = 200
    sigma: float = 2.0  # mid volatility per unit time
    dt: float = 0.005
    fill_a: float = 140.0  # order arrival intensity
    fill_k: float = 1.5  # intensity decay with distance from the mid
    inventory_penalty: float = 0.1  # per unit inventory^2 per unit time
    max_inventory: int = 20
    offsets: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0)  # quote distance choices per side


class MarketMakingEnv:
    """obs [N, 4] = (inventory / max, time left, last mid change / sigma sqrt(dt), 1); K^2 discrete actions."""

    obs_dim = 4

    def __init__(self, spec: MarketMakingSpec, device: torch.device, seed: int = 0) -> None:
        self.spec, self.device = spec, device
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.offsets = torch.tensor(spec.offsets, device=device)
        self.n_actions = len(spec.offsets) ** 2
        n = spec.n_envs
        self.mid = torch.full((n,), 100.0, device=device)
        self.inv = torch.zeros(n, device=device)
        self.cash = torch.zeros(n, device=device)
        self.t = torch.zeros(n, device=device, dtype=torch.long)
        self.last_dmid = torch.zeros(n, device=device)
        self.episode_return = torch.zeros(n, device=device)

    def observe(self) -> torch.Tensor:
        s = self.spec
        return torch.stack([
            self.inv / s.max_inventory,
            1.0 - self.t.float() / s.episode_len,
            self.last_dmid / (s.sigma * s.dt**0.5),
            torch.ones_like(self.inv),
        ], dim=-1)

    def reset(self) -> torch.Tensor:
        self.mid.fill_(100.0)
        for x in (self.inv, self.cash, self.last_dmid, self.episode_return):
            x.zero_()
        self.t.zero_()
        return self.observe()

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns (obs, reward, done, finished episode returns or NaN where not done)."""
        s, k = self.spec, len(self.spec.offsets)
        d_bid, d_ask = self.offsets[action // k], self.offsets[action % k]
        wealth0 = self.cash + self.inv * self.mid
        p_bid = 1 - torch.exp(-s.fill_a * torch.exp(-s.fill_k * d_bid) * s.dt)
        p_ask = 1 - torch.exp(-s.fill_a * torch.exp(-s.fill_k * d_ask) * s.dt)
        u = torch.rand((2, s.n_envs), generator=self.gen, device=self.device)
        buy = (u[0] < p_bid) & (self.inv < s.max_inventory)
        sell = (u[1] < p_ask) & (self.inv > -s.max_inventory)
        self.cash += torch.where(buy, -(self.mid - d_bid), 0.0) + torch.where(sell, self.mid + d_ask, 0.0)
        self.inv += buy.float() - sell.float()
        dmid = s.sigma * s.dt**0.5 * torch.randn(s.n_envs, generator=self.gen, device=self.device)
        self.mid += dmid
        self.last_dmid = dmid
        reward = self.cash + self.inv * self.mid - wealth0 - s.inventory_penalty * self.inv.pow(2) * s.dt
        self.episode_return += reward
        self.t += 1
        done = self.t >= s.episode_len
        finished = torch.where(done, self.episode_return, torch.full_like(reward, float("nan")))
        # Auto-reset finished rows with masks, not `if done.any()`: no device-to-host sync per step.
        self.mid = torch.where(done, 100.0, self.mid)
        self.inv, self.cash = torch.where(done, 0.0, self.inv), torch.where(done, 0.0, self.cash)
        self.last_dmid = torch.where(done, 0.0, self.last_dmid)
        self.episode_return = torch.where(done, 0.0, self.episode_return)
        self.t = torch.where(done, 0, self.t)
        return self.observe(), reward, done, finished
