"""MLP family: residual MLP blocks over the flattened window (`model.py`), sizes (`workload.py`)."""

from stride.models.mlp.model import MLPBlock, TabularMLP

__all__ = ["MLPBlock", "TabularMLP"]
