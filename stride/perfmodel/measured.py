"""A row's measurement as tokens/s per device, whatever the source measured.

Iteration time and tokens/s are used as they are. TFLOP/s per device and MFU are converted back
with the source's own FLOP convention (`tflops_metric`): sources differ on whether recompute is
counted (SC21 Eq. 3, Megatron-DeepSpeed with checkpointing), whether the causal mask halves
attention (MaxText; Megatron-LM's own count since 2025-03) and whether attention is counted at all (6N).
An unstated convention falls back on Megatron's model FLOPs (flops.model_flops: full attention square,
no recompute), noted.
"""

from __future__ import annotations

import math
import re

from stride.perfmodel.flops import active_params, causal_model_flops, model_flops
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.row_text import number

# Megatron-LM's logged model FLOPs (`num_floating_point_operations`, --log-throughput; Megatron-Bridge logs the same
# formula for dense and MoE models) count half the attention score square since NVIDIA/Megatron-LM 8873b55d6a
# (2025-03-06, "Only half of the attention matrix is non-zero"; first in Megatron-Core 0.12 and the 25.04 NeMo
# containers; the MLA and hybrid branches halved from their start). The moe_recipes README's TFLOP/s (blind round 16)
# read with the full square gave Qwen3-30B-A3B tokens/s 17% low: its 27.9 GFLOP a token is 23.0 halved, exactly the
# Megatron-Bridge verification cards' own TFLOP/s over tokens/s for the same model. NeMo's own formulas (NeMo
# TFLOPS) are another count, not read by this rule.
MEGATRON_LOGGED = re.compile(r"num_floating_point_operations|log-throughput|megatron-bridge|megatron bridge|"
                             r"megatron-core model tflop")
MEGATRON_CAUSAL_FROM = (0, 12)  # Megatron-Core
_CORE_VERSION = re.compile(r"(?:core_[rv]|megatron[-_ ]core\s*(?:==|v)?\s*|mcore\s*v?)(\d+)\.(\d+)")
_NEMO_CONTAINER = re.compile(r"nemo[:_ -]?(\d{2})\.(\d{2})")
_PYTORCH_CONTAINER = re.compile(r"pytorch[:_ -]?(\d{2})\.(\d{2})")
_DATE = re.compile(r"\b(20\d\d)-(\d\d)-(\d\d)\b")
_CURRENT_CODE = re.compile(r"\b(?:dev|main)\b")  # a branch as it was when the run was made


# What a metric says of its own attention count decides before any date: "attention not causal-halved" (the
# development rows of Megatron's 2024 README), "with attention causal-halved" (the USP paper, blind round 17, which
# changed Megatron's count of April 2024 to count "only effective computation under causal masking").
_NOT_HALVED = re.compile(r"\b(?:not|no|un)[\s-]*(?:causal[\s-]*)?halv|causal[\w\s-]{0,20}?\bnot\s+halv|"
                         r"full[\w\s-]{0,12}square|full\s+(?:causal\s+)?attention")
_HALVED = re.compile(r"causal[\s-]*halv|halv\w*[\w\s-]{0,20}?causal|causal[\w\s-]{0,30}?\bhalv|"
                     r"half\s+(?:of\s+)?the\s+attention")


def _said_causal_count(metric: str) -> bool | None:
    """True where the metric says its attention count is causal-halved, False where it says it is not, else None."""
    if _NOT_HALVED.search(metric):
        return False
    return True if _HALVED.search(metric) else None


def megatron_halves_attention(metric: str, context: str) -> bool:
    """The row's TFLOP/s is Megatron's own logged count from code that halves causal attention.

    The metric must name Megatron's count. Where it says whether that count halves causal attention ("attention
    causal-halved", "not causal-halved"), that decides. Otherwise what dates the code, first match decides:
    1. an explicit Megatron-Core version (core_r0.12.0, core_v0.12.0, megatron-core==0.13, Megatron-Core v0.15,
       mcore 0.12), 0.12 or later;
    2. Megatron-Bridge named in the metric (it began after the change);
    3. a NeMo container 25.04 or later (it ships Megatron-Core);
    4. a dev or main branch run with an NGC PyTorch container 25.04 or later, or dated 2025-03-06 or later (a
       PyTorch container alone dates nothing: it ships no Megatron).
    Otherwise the full square, the fallback."""
    m = (metric or "").lower()
    if not MEGATRON_LOGGED.search(m):
        return False
    said = _said_causal_count(m)
    if said is not None:
        return said
    low = f"{m} {context}".lower()
    versions = _CORE_VERSION.findall(low)
    if versions:
        return max((int(a), int(b)) for a, b in versions) >= MEGATRON_CAUSAL_FROM
    if "megatron-bridge" in m or "megatron bridge" in m:
        return True
    if any((int(y), int(mo)) >= (25, 4) for y, mo in _NEMO_CONTAINER.findall(low)):
        return True
    if _CURRENT_CODE.search(low):
        if any((int(y), int(mo)) >= (25, 4) for y, mo in _PYTORCH_CONTAINER.findall(low)):
            return True
        return any((int(y), int(mo), int(d)) >= (2025, 3, 6) for y, mo, d in _DATE.findall(low))
    return False


def flops_per_token(metric: str, spec: TransformerSpec, context: str = "") -> tuple[float, str]:
    """FLOPs per trained token under the convention `metric` names, and that convention's name. `context`: the
    row's other text (framework, notes), which dates a Megatron count (megatron_halves_attention)."""
    if megatron_halves_attention(metric, context):
        return causal_model_flops(spec, spec.seq) / spec.seq, "megatron (causal half, 2025-03+)"
    t = (metric or "").lower().replace(" ", "")
    s, L, h, V = spec.seq, spec.layers, spec.hidden, spec.vocab
    attn_dim = spec.q_dim
    if "eq.3" in t or "96*b" in t or re.search(r"24\*4\*b", t):
        return 96 * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)) / s, "sc21-eq3"
    if "72*b" in t or re.search(r"24\*3\*b", t):
        return 72 * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h)) / s, "megatron-72"
    if "num_floating_point_operations" in t:
        gated = 1.5 if spec.gated else 1.0
        ffn = spec.expert_ffn * spec.top_k if spec.moe else spec.ffn
        return 12 * L * h * h * ((1 + spec.kv_heads / spec.heads + s / h) + ffn / h * gated + V / (2 * L * h)), \
            "megatron"
    if "llm-foundry" in t or "12*l*d*s^2" in t:
        return 6 * active_params(spec) + 12 * L * h * s, "llm-foundry"
    if "maxtext" in t:
        return 6 * active_params(spec) + 6 * spec.heads * L * spec.head_dim * s, "maxtext"
    if "palm" in t:
        return 6 * active_params(spec) + 12 * L * attn_dim * s, "palm"
    if re.search(r"6\*?n|6nd|6\*params", t):
        return 6.0 * active_params(spec), "6N"
    return model_flops(spec, s) / s, "megatron model FLOPs (convention not stated)"


def _peak_in_text(metric: str) -> float | None:
    """The peak TFLOP/s a source divided by ("over a peak of 989", "/ 312 TFLOP/s"); None where it names none, or
    several (one per device: "A100 312, H100 989"), which the catalog's peak of the row's device then replaces.
    Numbers glued to a letter are part names (A100, H100), never peaks."""
    low = (metric or "").lower()
    m = re.search(r"peak\D{0,12}?(?<![a-z\d.])(\d{2,5}(?:\.\d+)?)(?![\d.])|/\s*(\d{2,5}(?:\.\d+)?)\s*t", low)
    if not m:
        return None
    rest = low[m.start():]
    if len(set(re.findall(r"(?<![a-z\d.])(\d{3,5}(?:\.\d+)?)\s*(?:,|\)|tflop|$)", rest))) > 1:
        return None
    # "(989 TFLOP/s H100 SXM, 312 A100)": a peak beside each part it names (blind round 30)
    beside = r"(?<![a-z\d.])(\d{3,5}(?:\.\d+)?)(?:\s*tflop\S*)?\s+(?:[a-z]+\s+)?(?:a|h|b|gb|v|mi)\d{2,3}\b"
    if len(set(re.findall(beside, rest))) > 1:
        return None
    return float(m.group(1) or m.group(2)) * 1e12


MEASURE_COLUMNS = ("meas_iter_time_s", "meas_tokens_per_s_per_gpu", "meas_tflops_per_gpu", "meas_mfu_pct")


def has_measurement(row: dict) -> bool:
    """The row states a throughput (iteration time, tokens/s, TFLOP/s or MFU), readable or not."""
    return any(str(row.get(c) or "").strip() for c in MEASURE_COLUMNS)


# Two measurements of one row disagree past this ratio only when one of them is wrong: FLOP conventions the row does
# not name move TFLOP/s by up to ~1.7x (LoRA rows: 1.6-1.7x; an "eMFU" over the bf16 peak for an fp8 run: 2.1x, the
# largest of the 700 rows in data/perfmodel and its holdouts)
DISAGREE = 3.0


def measured_tokens_per_s(row: dict, spec: TransformerSpec | None, global_batch: int, devices: int,
                          peak_flops: float | None) -> tuple[float | None, str]:
    """The row's measured tokens/s per device and how it was obtained; None with the reason where the row's
    measurement cannot be true (not a positive number, its columns disagree past DISAGREE, above the device's
    peak), so that it is never scored as the model's error."""
    for col in MEASURE_COLUMNS:
        raw = str(row.get(col) or "").strip()
        v = number(raw) if raw else None
        if raw and not (v is not None and math.isfinite(v) and v > 0):
            return None, f"{col} {raw!r} is not a positive number: the measurement is not scored"
    value, how = _measured(row, spec, global_batch, devices, peak_flops)
    if value is None or spec is None:
        return value, how
    every = _every_reading(row, spec, global_batch, devices, peak_flops)
    if len(every) > 1 and max(every.values()) > DISAGREE * min(every.values()):
        said = ", ".join(f"{k} -> {v:,.0f}" for k, v in every.items())
        return None, f"the row's measurements disagree (tokens/s per device from {said}): the measurement is not scored"
    mfu = number(row.get("meas_mfu_pct"))
    if mfu is not None and mfu > 100:
        return None, f"meas_mfu_pct {mfu:g} is above 100%: the measurement is not scored"
    if peak_flops:
        implied = value * model_flops(spec, spec.seq) / spec.seq / peak_flops
        if implied > 1.0:
            return None, (f"the measured {value:,.0f} tokens/s per device is {implied:.0%} of the device's peak in "
                          "model FLOPs (above 100%): the measurement is not scored")
    return value, how


def _every_reading(row: dict, spec: TransformerSpec, global_batch: int, devices: int,
                   peak_flops: float | None) -> dict[str, float]:
    """Tokens/s per device from each measurement column the row fills."""
    out: dict[str, float] = {}
    for col in MEASURE_COLUMNS:
        only = {k: (row.get(k) if k == col else "") for k in MEASURE_COLUMNS}
        v, _ = _measured({**row, **only}, spec, global_batch, devices, peak_flops)
        if v:
            out[col] = v
    return out


def _measured(row: dict, spec: TransformerSpec | None, global_batch: int, devices: int,
              peak_flops: float | None) -> tuple[float | None, str]:
    direct = number(row.get("meas_tokens_per_s_per_gpu"))
    if direct and direct > 0:
        return direct, "meas_tokens_per_s_per_gpu"
    it = number(row.get("meas_iter_time_s"))
    if it and it > 0 and spec and global_batch and devices:
        return global_batch * spec.seq / it / devices, "meas_iter_time_s"
    if spec is None:
        return None, "inputs not readable"
    metric = row.get("tflops_metric") or ""
    context = " ".join(str(row.get(k) or "") for k in ("framework", "notes", "source", "source_locator"))
    fpt, conv = flops_per_token(metric, spec, context)
    tf = number(row.get("meas_tflops_per_gpu"))
    if tf and tf > 0:
        return tf * 1e12 / fpt, f"meas_tflops_per_gpu / FLOPs per token ({conv})"
    mfu = number(row.get("meas_mfu_pct"))
    peak = _peak_in_text(metric) or peak_flops
    if mfu and mfu > 0 and peak:
        frac = mfu / 100 if mfu > 1.0 else mfu
        return frac * peak / fpt, f"meas_mfu_pct x peak / FLOPs per token ({conv})"
    return None, "no measured throughput (iteration time, tokens/s, TFLOP/s or MFU)"


def measured_memory_gib(row: dict) -> float | None:
    v = number(row.get("meas_peak_mem_gib"))
    return v if v and v > 0 else None
