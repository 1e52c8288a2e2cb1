"""Windows over a [A, N, F] series gathered with one vectorised index per batch (no per-sample loop)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


class WindowBatches:
    """Batches of (x [B, T, F], y [B, H]) from windows ending at the given (asset, t) pairs.

    A window ending at t covers rows t-T+1..t; its target is the forward return after t, so
    features never see the future the target is made of. Shuffling is seeded by (seed, epoch),
    so every epoch's order is reproducible and `state_dict` can resume mid-epoch. A stateless source
    (validation) yields the same batches, from the start, on every iteration.
    """

    def __init__(
        self,
        features: torch.Tensor,
        targets: torch.Tensor,
        ends: np.ndarray,
        seq_len: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        stateful: bool = True,
    ) -> None:
        if len(ends) < batch_size and drop_last:
            raise ValueError(f"only {len(ends)} windows for batch size {batch_size}")
        self.features, self.targets = features, targets
        self.ends = torch.as_tensor(ends, dtype=torch.long)  # [W, 2] (asset, end t)
        self.seq_len, self.batch_size = seq_len, batch_size
        self.shuffle, self.seed, self.drop_last, self.stateful = shuffle, seed, drop_last, stateful
        self.epoch, self.position = 0, 0
        self._offsets = torch.arange(-seq_len + 1, 1)

    def __len__(self) -> int:
        n = len(self.ends)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def _order(self) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(len(self.ends))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(len(self.ends), generator=g)

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        asset, end = self.ends[idx, 0], self.ends[idx, 1]
        rows = end[:, None] + self._offsets  # [B, T]
        x = self.features[asset[:, None], rows]  # one advanced-index gather: [B, T, F]
        y = self.targets[asset, end]
        return x, y

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if not self.stateful:
            order = self._order()
            for i in range(len(self)):
                yield self.gather(order[i * self.batch_size : (i + 1) * self.batch_size])
            return
        order = self._order()
        while self.position < len(self):
            i = self.position
            self.position += 1
            yield self.gather(order[i * self.batch_size : (i + 1) * self.batch_size])
        self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self.seed = int(state["epoch"]), int(state["position"]), int(state["seed"])


def window_ends(n_assets: int, t_lo: int, t_hi: int) -> np.ndarray:
    """All (asset, t) with t in [t_lo, t_hi)."""
    t = np.arange(t_lo, t_hi)
    return np.stack(np.meshgrid(np.arange(n_assets), t, indexing="ij"), axis=-1).reshape(-1, 2)
