"""A `stride train --nproc` launcher trains nothing: it checks the config and the layout, then waits on torchrun.

It used to import torch._dynamo (a meta-device build's random init and RoPE tables ran through PyTorch's meta
decompositions), DTensor (the tensor-parallel plan's imports) and torch.distributed.checkpoint (the checkpoint
package's __init__, for one signal helper): about 1.8 s of every launch's start on a 2-core host, measured as
9.6 s against 11.4 s for a 10-step 2-rank run (median of 3). These tests run the launcher's own imports and
checks in a fresh interpreter and name what it must not load; a rank still loads all of it when it needs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

HEAVY = ("torch._dynamo", "torch.distributed.tensor", "torch.distributed.checkpoint")


def _loaded_after(code: str, tmp_path: Path) -> dict:
    script = textwrap.dedent(code) + textwrap.dedent(f"""
        import json, sys
        print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("tp", [1, 2])
def test_the_launchers_checks_load_no_dynamo_dtensor_or_dcp(tmp_path: Path, tp: int) -> None:
    loaded = _loaded_after(f"""
        from stride.config import load_config
        from stride.launch.preflight import check_before_launch
        from stride.launch.torchrun import torchrun_command
        from stride.checkpoint.signals import repeat_window
        from stride.train.resources import check_resources
        cfg = load_config(overrides=["parallel.tp={tp}", "model.n_heads=4", "model.d_model=32"])
        check_resources(cfg, ranks_here=2, warn=False)
        check_before_launch(cfg, 2)
    """, tmp_path)
    # tp=2 builds the plan, whose styles are DTensor's: the one import a TP layout check needs
    assert loaded == {"torch._dynamo": False, "torch.distributed.tensor": tp == 2,
                      "torch.distributed.checkpoint": False}


def test_the_checkpoint_packages_names_still_import() -> None:
    import stride.checkpoint as ckpt

    for name in ckpt.__all__:
        assert getattr(ckpt, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ckpt.nope  # noqa: B018


def test_a_model_built_on_meta_has_the_shapes_of_the_real_one() -> None:
    from stride.config.schema import ModelConfig
    from stride.models.registry import WORKLOADS, build_model
    from stride.models.size import on_meta

    for name in WORKLOADS:
        cfg = ModelConfig(name=name)
        real = build_model(cfg, 8, 64, 1)
        with on_meta():
            meta = build_model(cfg, 8, 64, 1)
        shapes = {k: (tuple(v.shape), v.dtype) for k, v in real.state_dict().items()}
        assert shapes == {k: (tuple(v.shape), v.dtype) for k, v in meta.state_dict().items()}, name
        assert all(p.is_meta for p in meta.parameters())
        buffers = dict(real.named_buffers())
        for k, b in meta.named_buffers():  # RoPE tables: their shape on meta, their values only when real
            assert b.is_meta and b.shape == buffers[k].shape and b.dtype == buffers[k].dtype, (name, k)
    # outside on_meta nothing changed: fills fill
    w = torch.empty(64, 64)
    torch.nn.init.normal_(w, std=0.02)
    assert 0.015 < float(w.std()) < 0.025
