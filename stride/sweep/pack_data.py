"""Batches for a pack: one stream per distinct data source, shared by every model that reads it.

Models whose `[data]` section and batch size are equal read the same batches in the same order (their
solo runs would too), so the pack gathers each batch once and hands it to all of them (vmap's
`in_dims=None`: no copy). Models with another data seed get their own stream, and the step stacks
their batches [N, B, ...]. Explicit (X, Y) tensors (as `Trainer(train_data=...)` takes them) are
shuffled by `train.seed`, so there the stream is per train seed, as in the solo run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from stride.config import RunConfig
from stride.data.build import build_data
from stride.train.batches import Batch, as_batches, endless


@dataclass
class Stream:
    train: Any  # the batch source (a ShardedLoader / TensorBatches / user iterable)
    val: Any | None
    dims: tuple[int, int, int]  # n_features, seq_len, n_horizons
    it: Iterator[tuple[int, Batch]] | None = None

    def next(self) -> Batch:
        if self.it is None:
            self.it = endless(self.train)
        return self.it.__next__()[1]

    def data_state(self, steps: int) -> dict[str, Any]:
        """The data position after `steps` batches, in the checkpoint's form (stride.checkpoint.train_state)."""
        if hasattr(self.train, "state_dict") and hasattr(self.train, "__len__"):
            per_epoch = len(self.train)
            state = dict(self.train.state_dict())
            state.update(epoch=steps // per_epoch, position=steps % per_epoch)
            return {"kind": "state_dict", "state": state}
        return {"kind": "replay", "batches": steps}


def _dims_of(data: Any) -> tuple[int, int, int]:
    x, y = data
    return int(x.shape[-1]), int(x.shape[1]) if x.dim() >= 3 else 1, int(y.shape[-1])


class PackData:
    """The streams of a pack and which one each model reads."""

    def __init__(self, cfgs: list[RunConfig], train_data: Any = None, val_data: Any = None) -> None:
        self.streams: list[Stream] = []
        self.of: list[int] = []
        keys: dict[str, int] = {}
        tensors = isinstance(train_data, tuple | list) and len(train_data) == 2
        for c in cfgs:
            bs = c.train.batch_size
            if train_data is None:
                key = json.dumps([c.data.__dict__, bs], sort_keys=True, default=str)
            else:
                key = json.dumps([c.train.seed if tensors else 0, bs])
            if key not in keys:
                keys[key] = len(self.streams)
                self.streams.append(self._stream(c, train_data, val_data))
            self.of.append(keys[key])
        self.shared = len(self.streams) == 1

    @staticmethod
    def _stream(c: RunConfig, train_data: Any, val_data: Any) -> Stream:
        bs, seed = c.train.batch_size, c.train.seed
        if train_data is None:
            b = build_data(c.data, bs, validation=c.train.validates)
            return Stream(b.train, b.val, (b.n_features, b.seq_len, b.n_horizons))
        train = as_batches(train_data, bs, seed)
        val = as_batches(val_data, bs, seed, shuffle=False, drop_last=False) if val_data is not None else None
        dims = _dims_of(train_data) if isinstance(train_data, tuple | list) else _dims_of(next(iter(train)))
        return Stream(train, val, dims)

    def dims(self, i: int) -> tuple[int, int, int]:
        return self.streams[self.of[i]].dims

    def batch(self, device: torch.device, precision: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The next step's batch: x [B, ...] when every model shares it, else [N, B, ...] stacked per model."""
        got = [_to_device(s.next(), device, precision) for s in self.streams]
        if self.shared:
            return got[0]
        return torch.stack([got[g][0] for g in self.of]), torch.stack([got[g][1] for g in self.of])

    def val_batches(self, n: int, device: torch.device, precision: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The first `n` validation batches (as `Trainer.evaluate` takes them), shared or stacked like `batch`."""
        its = [iter(s.val) for s in self.streams]
        for _ in range(n):
            try:
                got = [_to_device(next(it), device, precision) for it in its]
            except StopIteration:
                return
            if self.shared:
                yield got[0]
            else:
                sizes = {len(got[g][0]) for g in self.of}
                if len(sizes) > 1:  # a short last batch of one stream: stop where the shortest ends
                    return
                yield torch.stack([got[g][0] for g in self.of]), torch.stack([got[g][1] for g in self.of])

    def close(self) -> None:
        for s in self.streams:
            if s.it is not None and hasattr(s.it, "close"):
                s.it.close()


def _to_device(batch: Batch, device: torch.device, precision: str) -> Batch:
    """As `Trainer._to_device`: bf16 feature batches are upcast on the device for fp32 training."""
    x, y = batch
    nb = device.type == "cuda"
    x = x.to(device, non_blocking=nb)
    if x.dtype == torch.bfloat16 and precision == "fp32":
        x = x.float()
    return x, y.to(device, non_blocking=nb)
