"""Performance model: predict step time, memory and cost of a training layout, and plan one.

Bottom to top: hardware catalog and model dimensions -> analytic FLOPs, activations and
collective costs -> `costmodel.predict` for one layout -> `planner.search` over layouts.
"""

from stride.perfmodel.costmodel import Prediction, predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import Catalog, Hardware, load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS, TransformerSpec, parse_model_spec

__all__ = ["PRESETS", "Catalog", "Efficiency", "Hardware", "Layout", "Prediction", "TransformerSpec",
           "load_catalog", "parse_model_spec", "predict"]
