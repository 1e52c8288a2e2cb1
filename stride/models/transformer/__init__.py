"""Transformer family: the time-series forecaster and the GPT-style token model, on the blocks of
`layers.py`, with their tensor-parallel plan (`parallelize.py`) and sizes (`workload.py`)."""

from stride.models.transformer.model import TimeSeriesTransformer
from stride.models.transformer.token_lm import TokenLM

__all__ = ["TimeSeriesTransformer", "TokenLM"]
