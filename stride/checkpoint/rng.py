"""Every random number generator a training step draws from, as plain tensors DCP can store.

Python's `random`, NumPy's global generator, torch's CPU generator and each CUDA device's. Kept as
tensors (not pickled tuples) so a checkpoint holds no objects that need unpickling.

A checkpoint's states are input like any file (`rng_problem`): each is checked for the type, shape and value
ranges `capture_rng` writes before any is applied, and one that is not is a reason to skip the checkpoint. NumPy's
legacy MT19937 does not check the position it is given: a position past the 624-word key read memory beyond it on
every draw (above ~1000: a segfault once anything drew from `np.random`; below: heap bytes as "random" numbers), and
Python's `random.setstate` refused a bad index with a ValueError only after the model had been loaded (audit 14, H1).
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch

MT_N = 624  # words of Mersenne Twister state (Python's random, NumPy's legacy generator)
PY_VERSION = 3  # random.getstate()'s format version
_U32 = 2**32 - 1


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


def _layout_problem(state: dict[str, torch.Tensor], key: str, dtype: torch.dtype, numel: int) -> str | None:
    t = state.get(key)
    if t is None:
        return f"rng.{key} is missing"
    if not isinstance(t, torch.Tensor):
        return f"rng.{key} is a {type(t).__name__}, not a tensor"
    if t.dtype != dtype or t.dim() != 1 or t.numel() != numel:
        return (f"rng.{key} is a {t.dtype} tensor of shape {tuple(t.shape)}, not the {numel} {dtype} values stride "
                "writes")
    return None


def _out_of(t: torch.Tensor, lo: int, hi: int) -> int | None:
    """The first value of the integer tensor `t` outside [lo, hi], or None."""
    bad = ((t < lo) | (t > hi)).nonzero()
    return int(t[int(bad[0, 0])]) if len(bad) else None


def _generator_problem(t: torch.Tensor, device: str) -> str | None:
    """What a generator of `device` says of the state `t` (its own checks: size, MT19937 validity, the Philox
    offset), tried on a scratch generator so no global one is touched."""
    try:
        torch.Generator(device=device).set_state(t.detach().to("cpu", torch.uint8).contiguous())
    except (RuntimeError, ValueError, TypeError) as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def rng_problem(state: dict[str, torch.Tensor]) -> str | None:
    """What is wrong with a checkpoint's RNG states (None: nothing), before any is applied: every generator's state
    of the type, shape and value ranges `capture_rng` writes. Python's: version 3, 624 words of 32 bits and an index
    in 0..624, a gauss flag of 0 or 1 and a finite value; NumPy's MT19937: a 624-word key of 32-bit values, a
    position in 0..624, a gauss flag of 0 or 1 and a finite value; torch's CPU and CUDA states: uint8 tensors of this
    process's state size that a scratch generator accepts (torch checks the MT19937 state and the Philox offset)."""
    if not isinstance(state, dict):
        return "rng is not a table of generator states"
    for key, dtype, numel in (("python_state", torch.int64, MT_N + 2), ("python_gauss", torch.float64, 2),
                              ("numpy_key", torch.int64, MT_N), ("numpy_meta", torch.int64, 2),
                              ("numpy_gauss", torch.float64, 1),
                              ("torch_cpu", torch.uint8, torch.get_rng_state().numel())):
        if why := _layout_problem(state, key, dtype, numel):
            return why
    ps = state["python_state"]
    if int(ps[0]) != PY_VERSION:
        return f"rng.python_state version {int(ps[0])} is not Python's random state version {PY_VERSION}"
    if (v := _out_of(ps[1:-1], 0, _U32)) is not None:
        return f"rng.python_state holds {v}, not a 32-bit word"
    if not 0 <= int(ps[-1]) <= MT_N:
        return f"rng.python_state index {int(ps[-1])} is not 0..{MT_N}"
    for key in ("python_gauss", "numpy_gauss"):
        values = state[key].tolist()
        if not all(math.isfinite(v) for v in values):
            return f"rng.{key} holds {values}, not finite numbers"
    if state["python_gauss"].tolist()[0] not in (0.0, 1.0):
        return f"rng.python_gauss flag {state['python_gauss'].tolist()[0]} is not 0 or 1"
    if (v := _out_of(state["numpy_key"], 0, _U32)) is not None:
        return f"rng.numpy_key holds {v}, not a 32-bit word"
    pos, has_gauss = state["numpy_meta"].tolist()
    if not 0 <= pos <= MT_N:
        return f"rng.numpy_meta pos {pos} is not 0..{MT_N}"
    if has_gauss not in (0, 1):
        return f"rng.numpy_meta has_gauss {has_gauss} is not 0 or 1"
    if why := _generator_problem(state["torch_cpu"], "cpu"):
        return f"rng.torch_cpu is not a torch CPU generator state ({why})"
    n_dev = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for key in sorted(k for k in state if k.startswith("cuda_")):
        index = key[5:]
        if not index.isdigit():
            return f"rng.{key} is not a CUDA device's state"
        t = state[key]
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.dim() != 1:
            return f"rng.{key} is not a uint8 tensor of a CUDA generator state"
        if int(index) < n_dev:
            if t.numel() != (want := torch.cuda.get_rng_state(int(index)).numel()):
                return f"rng.{key} holds {t.numel()} bytes, not the {want} of a CUDA generator state"
            if why := _generator_problem(t, f"cuda:{index}"):
                return f"rng.{key} is not a CUDA generator state ({why})"
    return None


def restore_rng(state: dict[str, torch.Tensor]) -> list[str]:
    """Set every generator from `state` (checked first: `rng_problem`, a ValueError naming what is wrong, and
    nothing set); returns notes on anything that could not be restored."""
    if why := rng_problem(state):
        raise ValueError(why)
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
