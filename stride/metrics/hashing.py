"""A hash of the parameters, for bitwise reproducibility checks across runs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch
from torch import nn


def params_sha256(model: nn.Module | Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over (name, dtype, shape, bytes) of every parameter, in name order.

    Takes a module or its state dict (a pipeline gathers its stages' parts into one, see
    stride.parallel.pipeline), with equal hashes for equal parameters either way.
    """
    h = hashlib.sha256()
    state = model.state_dict() if isinstance(model, nn.Module) else model
    for name, p in sorted(state.items()):
        if not isinstance(p, torch.Tensor):
            continue
        t = p.detach()
        if hasattr(t, "full_tensor"):  # DTensor: hash the full logical tensor
            t = t.full_tensor()
        t = t.cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
