"""Models written for one device, one folder per family; each declares how it may be split
(`plan.py`); parallelism and compilation are applied from outside."""

from stride.models.losses import make_loss
from stride.models.mlp import TabularMLP
from stride.models.registry import WORKLOADS, build_model
from stride.models.transformer import TimeSeriesTransformer

__all__ = ["WORKLOADS", "TabularMLP", "TimeSeriesTransformer", "build_model", "make_loss"]
