"""stride: a training-performance platform for quantitative ML research.

Public API: `stride.Trainer`, `stride.load_config`, `stride.RunConfig`.
Imports are lazy so `import stride` does not pull torch until the trainer is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from stride.config import RunConfig, load_config
    from stride.train.trainer import Trainer

__all__ = ["RunConfig", "Trainer", "load_config", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from stride.train.trainer import Trainer

        return Trainer
    if name in ("RunConfig", "load_config"):
        import stride.config as c

        return getattr(c, name)
    raise AttributeError(f"module 'stride' has no attribute {name!r}")
