"""Device choice, threads, seeds and deterministic mode: the process-wide settings a run depends on."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from stride.config.errors import ConfigError
from stride.config.schema import TrainConfig


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"`train.device` = {spec!r} but no CUDA device is available; use cpu or auto")
    return torch.device(spec)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


# Rank r > 0 draws its training randomness (dropout) from seed + RANK_SEED_STRIDE * r: a prime far above any seed a
# sweep enumerates, so two ranks of one run never share a stream with another run's rank 0.
RANK_SEED_STRIDE = 1_000_003


def seed_rank_stream(seed: int, rank: int) -> None:
    """Give each rank its own torch stream once the model is built (its initial weights, drawn before, stay equal on
    every rank). With one stream everywhere, dropout repeated its masks on every data-parallel rank's slice and, under
    TP, on head j of one rank and head j + heads/tp of the next (outside audit 11). Rank 0 keeps `seed`, so a
    one-process run is unchanged. The dropout sites all act on values each rank holds alone (data-parallel slices,
    TP-local attention heads, pipeline stages' own layers); none on a TP-replicated tensor, whose masks would have
    to match."""
    if rank:
        torch.manual_seed((seed + RANK_SEED_STRIDE * rank) % 2**63)


def configure_process(cfg: TrainConfig, device: torch.device) -> None:
    """Threads, seeds and determinism; call once before the model is built."""
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    if cfg.deterministic:
        # cuBLAS needs a fixed workspace for deterministic GEMMs; set before the first CUDA GEMM.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    if device.type == "cuda":
        # set_device refuses a bare "cuda" (no index); that is the current device already
        torch.cuda.set_device(device if device.index is not None else torch.cuda.current_device())
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
