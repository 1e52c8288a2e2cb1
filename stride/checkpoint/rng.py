"""Every random number generator a training step draws from, as plain tensors DCP can store.

Python's `random`, NumPy's global generator, torch's CPU generator and each CUDA device's. Kept as
tensors (not pickled tuples) so a checkpoint holds no objects that need unpickling.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def capture_rng() -> dict[str, torch.Tensor]:
    version, state, gauss = random.getstate()
    np_name, np_key, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    if np_name != "MT19937":
        raise ValueError(f"numpy global generator is {np_name}, expected MT19937")
    out = {
        "python_state": torch.tensor([version, *state], dtype=torch.int64),
        "python_gauss": torch.tensor([gauss is not None, gauss or 0.0], dtype=torch.float64),
        "numpy_key": torch.from_numpy(np.asarray(np_key, dtype=np.int64).copy()),
        "numpy_meta": torch.tensor([np_pos, np_has_gauss], dtype=torch.int64),
        "numpy_gauss": torch.tensor([np_gauss], dtype=torch.float64),
        "torch_cpu": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"cuda_{i}"] = s
    return out


def restore_rng(state: dict[str, torch.Tensor]) -> list[str]:
    """Set every generator from `state`; returns notes on anything that could not be restored."""
    notes: list[str] = []
    ps = state["python_state"].tolist()
    has_gauss, gauss = state["python_gauss"].tolist()
    random.setstate((int(ps[0]), tuple(int(v) for v in ps[1:]), gauss if has_gauss else None))
    pos, np_has_gauss = state["numpy_meta"].tolist()
    key = state["numpy_key"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", key, int(pos), int(np_has_gauss), float(state["numpy_gauss"][0])))
    torch.set_rng_state(state["torch_cpu"].to(torch.uint8).cpu())
    cuda_keys = sorted((k for k in state if k.startswith("cuda_")), key=lambda k: int(k[5:]))
    n_dev = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for k in cuda_keys:
        i = int(k[5:])
        if i < n_dev:
            torch.cuda.set_rng_state(state[k].to(torch.uint8).cpu(), i)
        else:
            notes.append(f"checkpoint has an RNG state for cuda:{i} but this process sees {n_dev} CUDA devices")
    return notes
