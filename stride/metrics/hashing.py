"""A hash of the parameters, for bitwise reproducibility checks across runs."""

from __future__ import annotations

import hashlib

import torch
from torch import nn


def params_sha256(model: nn.Module) -> str:
    """SHA-256 over (name, dtype, shape, bytes) of every parameter, in name order."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        if not isinstance(p, torch.Tensor):
            continue
        t = p.detach()
        if hasattr(t, "full_tensor"):  # DTensor: hash the full logical tensor
            t = t.full_tensor()
        t = t.cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
