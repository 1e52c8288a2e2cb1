"""How big a configured model is, known before it is built: parameters and buffer bytes.

The workload is built on the meta device (shapes only: no memory, no initialisation), so a config whose
model would need petabytes is measured in milliseconds and refused before `build_model` allocates it
(stride.train.resources). Blocks cost the same parameters each in every built-in workload, so a model of many
blocks is counted from builds of one and two blocks: on meta a transformer block still took 5-6 ms to build
(1000 blocks: 4.6 s, 5000: 30 s), so 100000 blocks would take about 10 minutes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from stride.config.errors import ConfigError
from stride.config.schema import ModelConfig

BUILT_LAYERS = 8  # up to this many blocks the model is built on meta as configured; above, counted from 1 and 2


# In-place fills (torch.nn.init's, and the tensor methods they call): on a meta tensor they fill nothing, yet
# PyTorch runs them through its Python meta decompositions, whose first use imports torch._dynamo (1.5 s on a
# 2-core host, paid by a `stride train --nproc` launcher, which trains nothing, for its size and layout checks).
_RANDOM_FILLS = (torch.Tensor.normal_, torch.Tensor.uniform_)


class _NoFillsOnMeta(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func in _RANDOM_FILLS or getattr(func, "__module__", None) == "torch.nn.init":  # nn.init.normal_, ...
            t = args[0] if args else kwargs.get("tensor")  # nn.init hands its tensor on by keyword
            if isinstance(t, torch.Tensor) and t.is_meta:
                return t  # what the fill returns; a meta tensor has no values to fill
        return func(*args, **kwargs)


@contextlib.contextmanager
def on_meta() -> Iterator[None]:
    """Build modules on the meta device (shapes only), without running their random initialisation."""
    with torch.device("meta"), _NoFillsOnMeta():
        yield


@dataclass(frozen=True)
class ModelSize:
    params: int  # parameters (elements)
    param_bytes: int  # their bytes at the dtype the model is built in
    buffer_bytes: int  # buffers (RoPE tables, ...)

    @property
    def bytes(self) -> int:
        return self.param_bytes + self.buffer_bytes


def model_size(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> ModelSize | None:
    """The size of the model `build_model(cfg, n_features, seq_len, n_horizons)` would build; None where it is not
    known without running user code (a `module:factory` model) or the workload does not build on meta.

    A config the builder refuses (heads that do not divide d_model) raises its ConfigError here, as the build would.
    """
    if ":" in cfg.name:
        return None
    n = cfg.n_layers
    if n is None or n <= BUILT_LAYERS:
        return _meta_size(cfg, n_features, seq_len, n_horizons)
    from stride.models.registry import check_depth

    check_depth(cfg, seq_len)  # what the build refuses of n blocks, builds of 1 and 2 cannot show
    one = _meta_size(dataclasses.replace(cfg, n_layers=1), n_features, seq_len, n_horizons)
    two = _meta_size(dataclasses.replace(cfg, n_layers=2), n_features, seq_len, n_horizons)
    if one is None or two is None:
        return None
    return ModelSize(*(a + (b - a) * (n - 1) for a, b in zip(
        (one.params, one.param_bytes, one.buffer_bytes), (two.params, two.param_bytes, two.buffer_bytes),
        strict=True)))


def _meta_size(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> ModelSize | None:
    from stride.models.registry import build_model

    try:
        with on_meta():
            model = build_model(cfg, n_features, seq_len, n_horizons)
    except ConfigError:
        raise
    except Exception:  # the real build will say what is wrong; a size is only a pre-check
        return None
    params = list(model.parameters())
    return ModelSize(sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params),
                     sum(b.numel() * b.element_size() for b in model.buffers()))
