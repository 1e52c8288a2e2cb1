"""Low precision as it runs: which GEMMs use FP8/FP4, what the casts cost, what the wire carries.

Recipes (the code read, file:line):
- `delayed`: Transformer Engine DelayedScaling (NVIDIA/TransformerEngine d0067d0da
  transformer_engine/common/recipe/__init__.py:173; amax history 1024 at :255): the scale comes
  from past amaxes, so the cast is one pass that also records the amax; on Hopper the wgrad GEMM
  needs the transposed FP8 copy, which TE's cast-transpose kernel writes in the same pass.
- `current`: TE Float8CurrentScaling (:286) and torchao `tensorwise` (pytorch/ao 36027d82d
  torchao/float8/config.py:141-160): the amax of the tensor itself is needed first, one more read.
- `rowwise`: torchao rowwise (CUTLASS rowwise kernel): per-row scales; the row-major and the
  column-major copies are quantized separately (each from the 16-bit tensor). `rowwise_gw_hp`
  keeps the weight-gradient GEMM in bf16.
- `mxfp8`: TE MXFP8BlockScaling (:337, Blackwell): 32-element blocks; both orientations
  quantized in one pass from the 16-bit input.
- `nvfp4`: TE NVFP4BlockScaling (:489, Blackwell): 16-element blocks, FP4 GEMMs at the fp4
  peak; a Hadamard transform on inputs and gradients (an extra 16x16 matmul pass, memory-bound).
In every recipe the attention core (flash attention), the embedding and the LM head stay in
16-bit unless the text says the head is FP8 (torchtitan's float8 converter skips `output`; TE
users wrap only the block's linears). Activations saved for backward of an FP8 linear are its FP8
input (1 B instead of 2). With FSDP, torchao tensorwise can all-gather FP8 weights
(torchao/float8/config.py:225 enable_fsdp_float8_all_gather): 1 B per weight on the wire.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stride.config.errors import ConfigError

RECIPES = ("delayed", "current", "tensorwise", "rowwise", "rowwise_gw_hp", "mxfp8", "nvfp4")


@dataclass(frozen=True)
class Recipe:
    name: str
    gemm_dtype: str  # the peak the block GEMMs use: fp8 or fp4
    cast_read: float  # bytes read per element cast (16-bit source; current scaling reads twice)
    cast_write: float  # bytes written per element (both orientations where the wgrad needs them)
    wgrad_low: bool  # the weight-gradient GEMM runs in low precision too
    extra_pass: float = 0.0  # bytes per element of a further memory-bound pass (Hadamard transform)


_RECIPES = {
    "delayed": Recipe("delayed", "fp8", 2.0, 2.0, True),
    "current": Recipe("current", "fp8", 4.0, 2.0, True),
    "tensorwise": Recipe("tensorwise", "fp8", 4.0, 2.0, True),
    "rowwise": Recipe("rowwise", "fp8", 4.0, 2.0, True),
    "rowwise_gw_hp": Recipe("rowwise_gw_hp", "fp8", 4.0, 2.0, False),
    "mxfp8": Recipe("mxfp8", "fp8", 2.0, 2.0 + 2 / 32, True),
    "nvfp4": Recipe("nvfp4", "fp4", 2.0, 1.0 + 2 / 16, True, extra_pass=4.0),
}


# Block-scaled formats (MXFP8's 32-element and NVFP4's 16-element scales) are tensor-core formats of Blackwell and AMD
# CDNA4 (MI350X/MI355X); Hopper and earlier have no instruction for them (an outside audit planned MXFP8 on an H100
# 4 % faster than per-tensor FP8).
BLOCK_SCALED = ("mxfp8", "nvfp4")
BLOCK_SCALED_GENERATIONS = ("blackwell", "cdna4")


def check_recipe_on(name: str, generation: str, part: str) -> None:
    """Refuse a block-scaled recipe on a part without the tensor cores for it (ConfigError naming both)."""
    if name in BLOCK_SCALED and generation not in BLOCK_SCALED_GENERATIONS:
        raise ConfigError(f"fp8/fp4 recipe `{name}` needs block-scaled tensor cores (Blackwell, MI350X/MI355X); "
                          f"`{part}` ({generation}) has none: use --fp8-recipe tensorwise, rowwise or delayed")


def recipe(name: str) -> Recipe:
    if name not in _RECIPES:
        raise ConfigError(f"unknown low-precision recipe `{name}`; known: {', '.join(RECIPES)}")
    return _RECIPES[name]


_FORMATS = r"(?:nv|mx)?fp[48]\w*|float8\w*|\bmxfp\w*"
# ... and a config object built switched off, `enabled` anywhere among its arguments: OLMo-core's
# "float8_config=Float8Config(compile=compile, enabled=False)", YAML's "float8: {enabled: false}"
_ARGS = r"(?:[^(){}]|\([^()]*\))*?"  # a call's other arguments, one level of nested calls ("ao=X.recommended()")
_OFF = (rf"(?:{_FORMATS})(?:\s*[=:]\s*\w*)?\s*[({{:]\s*{_ARGS}\benabled\s*[=:]\s*(?:false|0)\b{_ARGS}[)}}]?|"
        rf"(?:{_FORMATS})(?:\s*[=:]?\s*\(?\s*(?:none|null|false|off|disabled|no)\b|\s*[=:]\s*0(?![.\d]))|"
        rf"\b(?:no|without|not|disabled?)\W{{1,3}}(?:{_FORMATS})")


def recipe_from_text(text: str) -> tuple[str | None, str]:
    """(precision, recipe) named by free text: ("fp8", "delayed"), ("fp4", "nvfp4"), or (None, "")."""
    # a low-precision format said to be off is not run: "bf16 (fp8 None)", "fp8=false", "no FP8", "without float8"
    t = re.sub(_OFF, " ", (text or "").lower())
    if re.search(r"nvfp4|\bfp4\b|mxfp4", t):
        return "fp4", "nvfp4"
    if "mxfp8" in t:
        return "fp8", "mxfp8"
    # Transformer Engine alone is not FP8: it runs bf16 GEMMs too (its FP8 recipes are named by fp8 words)
    if not re.search(r"fp8|float8|e4m3", t):
        return None, ""
    if re.search(r"all[ _-]?gather", t):  # FP8 weight all-gather under FSDP: torchao's tensorwise recipe
        return "fp8", "tensorwise"
    if "rowwise_with_gw_hp" in t or "gw_hp" in t or "rowwise gw" in t:
        return "fp8", "rowwise_gw_hp"
    if "rowwise" in t or "row-wise" in t:
        return "fp8", "rowwise"
    if "tensorwise" in t or "dynamic" in t or "torchao" in t or "float8" in t and "te " not in t:
        return "fp8", "tensorwise"
    if "current" in t:
        return "fp8", "current"
    if "blockwise" in t or "block scaling" in t:
        return "fp8", "mxfp8"
    return "fp8", "delayed"
