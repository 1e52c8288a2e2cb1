"""The device a run trains on: a bare "cuda" gets an index before torch sees it.

torch.cuda.set_device (and NCCL's device_id) refuse "cuda" without one: the first GPU run (H200, torch
2.11) failed in the Trainer's constructor for `train.device = "cuda"` or "auto". These checks need no GPU.
"""

from __future__ import annotations

import pytest
import torch

from stride.parallel.context import Parallel
from stride.train.device import configure_process, resolve_device


def test_a_bare_cuda_device_gets_the_local_rank_as_its_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert Parallel.device_for(torch.device("cuda")) == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert Parallel.device_for(torch.device("cuda")) == torch.device("cuda", 3)
    assert Parallel.device_for(torch.device("cuda", 1)) == torch.device("cuda", 1)  # an explicit index stays
    assert Parallel.device_for(torch.device("cpu")) == torch.device("cpu")


def test_configure_process_gives_set_device_an_index(monkeypatch: pytest.MonkeyPatch) -> None:
    from stride.config import load_config

    seen: list[object] = []
    monkeypatch.setattr(torch.cuda, "set_device", seen.append)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    cfg = load_config(overrides=["train.steps=1"]).train
    configure_process(cfg, torch.device("cuda"))
    configure_process(cfg, torch.device("cuda", 2))
    assert seen == [0, torch.device("cuda", 2)]


def test_resolve_device_without_cuda_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message")
    from stride.config.errors import ConfigError

    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="no CUDA device"):
        resolve_device("cuda")
