"""Small rules that read the free-text fields of a published-results row.

Each returns the model's value and, where it assumed something, a note. Text the rules cannot
read raises ValueError naming the field and the text (the row is then refused with that reason).
"""

from __future__ import annotations

import math
import re

from stride.perfmodel.precision import recipe_from_text


def clean(text: str | None) -> str:
    """Lower-case text without parenthesised asides ("16-bit (inferred: ...)")."""
    return re.sub(r"\(.*?\)", "", text or "").strip().lower()


def number(text: str | None) -> float | None:
    """The first finite number in a cell ("1,024", "4.2k", "~900"), or None."""
    raw = (text or "").strip().lower().replace(",", "")
    m = re.search(r"[-+]?\d*\.?\d+(?:e[-+]?\d+)?", raw)
    if not m:
        return None
    try:
        v = float(m.group(0))
    except ValueError:
        return None
    if raw[m.end():m.end() + 1] == "k":
        v *= 1e3
    return v if math.isfinite(v) else None


def blank(text: str | None) -> bool:
    return clean(text) in ("", "n/a", "na", "-", "none", "not stated", "unknown", "?", "nan")


def precision(text: str) -> tuple[str, str, list[str]]:
    """(precision, fp8 recipe, notes) from "bf16 (inferred...)", "amp_fp8 (TE delayed)", "MXFP8"..."""
    low = (text or "").lower()
    prec, rec = recipe_from_text(low)
    if prec:
        return prec, rec, []
    if re.search(r"bf16|bfloat16", low):
        return "bf16", "delayed", []
    if re.search(r"fp16|16-bit|float16|half", low):
        return "fp16", "delayed", []
    if re.search(r"fp32|float32|tf32|full precision", low):
        return "fp32", "delayed", []
    if blank(text):
        return "bf16", "delayed", ["precision not stated: bf16 assumed"]
    raise ValueError(f"precision {text!r} is not understood (bf16, fp16, fp8 recipes, nvfp4, fp32)")


def zero_stage(text: str) -> tuple[int, list[str]]:
    """ZeRO stage: distributed optimizer = 1, SHARD_GRAD_OP = 2, FSDP / FULL_SHARD / ZeRO-3 = 3."""
    t = (text or "").lower().replace("_", " ").replace("-", " ")
    if re.search(r"zero\s*(stage\s*)?3|full shard|fully shard|\bfsdp\b(?!.*shard grad op)|fsdp2|ici fsdp", t):
        return 3, []
    if re.search(r"zero\s*(stage\s*)?2|shard grad op|hybrid shard zero2", t):
        return 2, []
    if re.search(r"zero\s*(stage\s*)?1|distributed optimizer|dist(ributed)? opt", t):
        return 1, []
    if re.search(r"zero\s*(stage\s*)?0|\bnone\b|\bno\b|^\s*$|n/a|\bddp\b|stage 0|zero_stage=0", t) or blank(text):
        return 0, []
    raise ValueError(f"zero_or_fsdp {text!r} is not understood (none, ZeRO-1/2/3, distributed optimizer, FSDP)")


def shard_group(text: str, dp: int, per_node: int) -> tuple[int, list[str]]:
    """Data-parallel ranks the ZeRO/FSDP states are sharded over when the text says the sharding is
    hybrid (0: all of dp): MaxText "ici_fsdp_parallelism=K, dcn_data_parallelism=R" (FSDP inside a slice,
    replicas across), torchtitan "dp_shard=K" / "data_parallel_shard_degree=K" /
    "data_parallel_replicate_degree=R", PyTorch "HYBRID_SHARD" / "HSDP" (FSDP inside a node)."""
    low = (text or "").lower().replace("-", "_")
    num = r"\s*[=:]?\s*(\d+)"
    m = re.search(r"(?:dcn_data_parallelism|dp_replicate|data_parallel_replicate_degree|replicas?)" + num, low)
    if m and int(m.group(1)) > 1 and dp % int(m.group(1)) == 0:
        return dp // int(m.group(1)), []
    m = re.search(r"(?:dp_shard|data_parallel_shard_degree|shard[_ ]group(?:[_ ]size)?)" + num, low)
    if m and 1 < int(m.group(1)) < dp and dp % int(m.group(1)) == 0:
        return int(m.group(1)), []
    if re.search(r"hybrid[_ ]?shard|\bhsdp\b", low) and per_node and 1 < per_node < dp and dp % per_node == 0:
        return per_node, [f"hybrid sharding: shard group = the {per_node} devices of a node (assumed)"]
    return 0, []


_RECOMPUTE_WORDS = [
    (r"qkv_proj_offloaded", "full-except-qkv"),
    (r"save_dot_except_mlpwi", "mlp-in"),
    (r"remat_policy\s*=\s*custom", "mlp"),
    (r"minimal|save_dot|dots_saveable|checkpoint_dots|nothing_saveable_except", "none"),
    (r"selective|attention core|core attention", "selective"),
    (r"^\s*(none|no|off|false|disabled|0)\b|\bno (recompute|checkpoint|remat)|without", "none"),
    (r"\bfull\b|every layer|uniform|rematerializ|\bremat|hfu\s*>\s*mfu|\btrue\b|\byes\b|activation[ _-]checkpoint"
     r"|recompute|\bon\b|nothing_saveable", "full"),
    (r"\bnone\b|\bno\b|\boff\b|false|disabled", "none"),
]


def recompute(text: str) -> str | None:
    """Recompute mode from words, or None where the row does not say (chosen later: cheapest that fits)."""
    if clean(text) in ("", "n/a", "na", "-", "not stated", "unknown", "?", "nan"):
        return None
    for candidate in (clean(text), (text or "").lower()):
        for pat, mode in _RECOMPUTE_WORDS:
            if candidate and re.search(pat, candidate):
                return mode
    raise ValueError(f"recompute {text!r} is not understood (none, selective, full, rematerialization words)")


def flag(text: str | None) -> bool:
    """True/yes/on, or a word like "sequence parallel" / "SP" in the cell."""
    low = (text or "").lower()
    if re.search(r"\bfalse\b|\bno\b|\boff\b|^\s*0\s*$", low):
        return False
    return bool(re.search(r"\btrue\b|\byes\b|\bon\b|^\s*1\s*$|sequence[- ]parallel|\bsp\b|enabled", low))


def schedule(text: str, pp: int, vpp: int) -> tuple[str, int]:
    if pp == 1:
        return "none", 1
    low = (text or "").lower()
    if vpp > 1 or "interleav" in low:
        return "interleaved", max(vpp, 2)
    if "gpipe" in low:
        return "gpipe", 1
    return "1f1b", 1


def activation(text: str, arch: str) -> tuple[str, list[str]]:
    """gelu, relu, squared-relu, silu, swiglu, geglu from the cell, else from the architecture."""
    low = (text or "").lower().replace("_", "-").replace(" ", "")
    table = [("squared-relu", r"squared-?relu|relu\^?2|relusquared|sqrelu"), ("swiglu", r"swiglu|silu-?glu|"
             r"silu,linear|silu.*gated|gated.*silu"), ("geglu", r"geglu|gelu-?glu|gated-?gelu"),
             ("relu", r"^relu$|\brelu\b"), ("silu", r"^silu$|swish"), ("gelu", r"gelu")]
    for name, pat in table:
        if re.search(pat, low):
            return name, []
    if not blank(text):
        raise ValueError(f"ffn_act {text!r} is not modelled (gelu, relu, squared-relu, silu, swiglu, geglu)")
    a = (arch or "").lower()
    if re.search(r"llama|mistral|mixtral|qwen|swiglu|deepseek|gemma", a):
        return "swiglu", ["ffn_act not stated: swiglu from the architecture"]
    if re.search(r"gpt|opt|bloom|mpt|falcon|gelu", a):
        return "gelu", ["ffn_act not stated: gelu from the architecture"]
    return "gelu", ["ffn_act not stated: gelu assumed"]


def moe(text: str) -> dict[str, float]:
    """Experts, top-k, MoE layer frequency, capacity factor and expert parallelism named in text."""
    low = (text or "").lower()
    out: dict[str, float] = {}
    m = re.search(r"(\d+)\s*(?:routed\s+)?experts|experts\s*[=:]\s*(\d+)|moe[- ](\d+)\b|(\d+)x\d+b", low)
    if m:
        out["experts"] = float(next(g for g in m.groups() if g))
    m = re.search(r"top[- _]?k?\s*[=:-]?\s*(\d+)|top[- ](\d+)", low)
    if m:
        out["top_k"] = float(next(g for g in m.groups() if g))
    if re.search(r"every (other|2nd|second) layer", low):
        out["moe_every"] = 2.0
    m = re.search(r"capacity[ _]factor\s*[=:]?\s*(\d+(?:\.\d+)?)", low)
    if m:
        out["capacity"] = float(m.group(1))
    m = re.search(r"(?:expert[ _]parallel(?:ism)?|\bep)\s*[=:]?\s*(\d+)", low)
    if m:
        out["ep"] = float(m.group(1))
    return out


def memory_kind(text: str) -> str:
    """What a measured memory figure counts: allocated (max allocated / active), reserved, or device."""
    low = (text or "").lower()
    if re.search(r"max(imum)?[ _]allocated|memory active|peak memory active|active bytes|allocated", low):
        return "allocated"
    if "reserved" in low:
        return "reserved"
    return "device"
