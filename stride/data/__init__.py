"""Data: the synthetic market generator, windowed batches, and the builder the trainer calls."""

from stride.data.build import DataBundle, build_data
from stride.data.synthetic import generate_market
from stride.data.windows import WindowBatches

__all__ = ["DataBundle", "WindowBatches", "build_data", "generate_market"]
