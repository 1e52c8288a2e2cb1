"""Rows of a published-results CSV (the ../shared/perfmodel/published_dev.csv format) as model inputs.

Sources write free text ("full (uniform, every layer)", "bf16 (inferred: ...)"); each field is
read by a small rule, and a row whose inputs cannot be read gets a `reason` instead of inputs,
never an exception. Rules that are assumptions, not readings (documented in docs/perfmodel.md):
- blank micro_batch -> 1; blank kv_heads -> heads; blank ffn_hidden -> 4 * hidden; blank vpp -> 1;
- recompute "not stated" -> the cheapest mode that fits (none, then selective, then full);
- attention materialises the s x s scores when the source is from 2022 or earlier (pre
  flash-attention Megatron), otherwise flash attention;
- "DDP-impl=local" means gradient all-reduce after backward (not overlapped);
  "comm overlap" in the framework means DP and TP communication overlap.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

from stride.config.errors import ConfigError
from stride.perfmodel.hardware import Catalog, Hardware
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import TransformerSpec


@dataclass
class RowInputs:
    row_id: str
    spec: TransformerSpec | None = None
    layout: Layout | None = None
    hardware: Hardware | None = None
    global_batch: int = 0
    recompute_auto: bool = False
    reason: str | None = None
    notes: tuple[str, ...] = ()


def _clean(text: str | None) -> str:
    return re.sub(r"\(.*?\)", "", text or "").strip().lower()


def _int(row: dict, key: str, default: int | None = None) -> int:
    raw = _clean(row.get(key))
    if raw in ("", "n/a", "na", "-"):
        if default is None:
            raise ValueError(f"`{key}` is blank")
        return default
    try:
        val = float(raw)
    except ValueError:
        raise ValueError(f"`{key}` is not a number: {row.get(key)!r}") from None
    if val != int(val) or val < 1:
        raise ValueError(f"`{key}` must be a positive integer, got {row.get(key)!r}")
    return int(val)


def _float(row: dict, key: str) -> float | None:
    raw = _clean(row.get(key))
    try:
        v = float(raw)
    except ValueError:
        return None
    return v if math.isfinite(v) and v > 0 else None


def _years(text: str) -> list[int]:
    years = [int(y) for y in re.findall(r"\b(20\d\d)\b", text)]
    years += [2000 + int(y) for y in re.findall(r"arxiv:(\d\d)\d\d\.", text.lower())]
    return years


def _precision(text: str) -> str:
    t = text.lower()
    if "fp8" in t:
        return "fp8"
    if "bf16" in t or "bfloat16" in t:
        return "bf16"
    if "fp16" in t or "16-bit" in t or "float16" in t:
        return "fp16"
    raise ValueError(f"precision {text!r} is not modelled (bf16, fp16, fp8)")


def _zero(text: str) -> int:
    t = _clean(text) if "(" in text else text.strip().lower()
    t = t.replace("-", "").replace("_", " ")
    if t in ("", "none", "no", "n/a", "ddp"):
        return 0
    if "distributed optimizer" in t or "zero1" in t or "zero 1" in t:
        return 1
    if "zero2" in t or "zero 2" in t:
        return 2
    if "zero3" in t or "zero 3" in t or "fsdp" in t:
        return 3
    raise ValueError(f"zero_or_fsdp {text!r} is not understood")


def _recompute(text: str) -> str | None:
    t = _clean(text)
    if t.startswith("full"):
        return "full"
    if t.startswith("selective"):
        return "selective"
    if t in ("none", "no", "off", "false"):
        return "none"
    if t in ("", "not stated", "n/a", "unknown"):
        return None
    raise ValueError(f"recompute {text!r} is not understood (full, selective, none)")


def row_inputs(row: dict, catalog: Catalog) -> RowInputs:
    """Read one CSV row into model inputs, or a `reason` it cannot be modelled."""
    rid = (row.get("row_id") or "").strip() or "?"
    try:
        return _row_inputs(rid, row, catalog)
    except (ValueError, ConfigError, KeyError, ZeroDivisionError) as exc:
        return RowInputs(rid, reason=str(exc))


def _row_inputs(rid: str, row: dict, catalog: Catalog) -> RowInputs:
    notes: list[str] = []
    act_raw = _clean(row.get("ffn_act"))
    act = {"gelu": "gelu", "swiglu": "swiglu", "silu": "swiglu", "geglu": "swiglu"}.get(act_raw)
    if act is None:
        raise ValueError(f"ffn_act {row.get('ffn_act')!r} is not modelled (gelu, swiglu)")
    hidden, heads = _int(row, "hidden"), _int(row, "heads")
    arch = f"{row.get('arch', '')} {row.get('model', '')}".lower()
    gpt_style = ("gpt" in arch or "nlg" in arch) and act == "gelu"
    spec = TransformerSpec(
        layers=_int(row, "layers"), hidden=hidden, heads=heads, kv_heads=_int(row, "kv_heads", heads),
        ffn=_int(row, "ffn_hidden", 4 * hidden), act=act, vocab=_int(row, "vocab"), seq=_int(row, "seq_len"),
        tied_embeddings=gpt_style, learned_pos=gpt_style, bias=gpt_style, dropout=gpt_style,
        name=(row.get("model") or rid).strip(),
    )
    if _clean(row.get("micro_batch")) == "":
        notes.append("micro_batch blank: assumed 1")
    n_gpus = _int(row, "num_gpus")
    tp, pp, cp = _int(row, "tp", 1), _int(row, "pp", 1), _int(row, "cp", 1)
    dp = _int(row, "dp", max(1, n_gpus // (tp * pp * cp)))
    if dp * tp * pp * cp != n_gpus:
        raise ValueError(f"dp*tp*pp*cp = {dp * tp * pp * cp} != num_gpus {n_gpus}")
    vpp = _int(row, "vpp", 1)
    sched_raw = _clean(row.get("pp_schedule"))
    if pp == 1:
        schedule, vpp = "none", 1
    elif vpp > 1:
        schedule = "interleaved"
    elif "gpipe" in sched_raw:
        schedule = "gpipe"
    else:
        schedule = "1f1b"
    text = f"{row.get('source', '')} {row.get('framework', '')}"
    low = text.lower()
    years = _years(text)
    materialized = bool(years) and max(years) <= 2022 and "flash" not in low
    recompute = _recompute(row.get("recompute", ""))
    hw = catalog.get(row.get("gpu") or "")
    per_node = _int(row, "gpus_per_node", hw.scaleup_domain)
    if per_node != hw.scaleup_domain and hw.scaleup_domain <= 8:
        hw = dataclasses.replace(hw, scaleup_domain=per_node)
    layout = Layout(
        dp=dp, tp=tp, pp=pp, cp=cp, zero=_zero(row.get("zero_or_fsdp", "")),
        sp=_clean(row.get("sp")).startswith("true"), schedule=schedule, vpp=vpp,
        micro_batch=_int(row, "micro_batch", 1), recompute=recompute or "none",
        precision=_precision(row.get("precision", "")),
        attention="materialized" if materialized else "flash",
        dp_overlap="ddp-impl=local" not in low, tp_overlap="overlap" in low and "tp" in low,
    )
    return RowInputs(rid, spec, layout, hw, _int(row, "global_batch_seqs"), recompute is None, None, tuple(notes))


def read_rows(path: str | Path) -> list[dict]:
    """CSV rows as dicts; a missing file or header is a ConfigError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--from-csv: file not found: {p}")
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or "row_id" not in reader.fieldnames:
            raise ConfigError(f"{p}: expected a CSV header with a `row_id` column")
        return list(reader)


# ---- measured values, recounted with each source's own FLOP convention ----------------------


def convention_flops_per_iter(row: dict, spec: TransformerSpec, global_batch: int) -> float | None:
    """FLOPs per iteration as the source counted them (from `tflops_metric`), or None if unknown."""
    metric = (row.get("tflops_metric") or "").lower()
    b, s, L, h, V = global_batch, spec.seq, spec.layers, spec.hidden, spec.vocab
    if "eq.3" in metric or "96*b" in metric:
        return 96 * b * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    if "72*b" in metric:
        return 72 * b * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    if "num_floating_point_operations" in metric:
        gated = 1.5 if spec.act == "swiglu" else 1.0
        return 12 * b * s * L * h * h * (
            (1 + spec.kv_heads / spec.heads + s / h) + spec.ffn / h * gated + V / (2 * L * h))
    return None


def measured_tokens_per_s_per_gpu(row: dict, inputs: RowInputs) -> tuple[float | None, str]:
    """The row's measured tokens/s per GPU and how it was obtained (iteration time preferred)."""
    direct = _float(row, "meas_tokens_per_s_per_gpu")
    if direct:
        return direct, "meas_tokens_per_s_per_gpu"
    if inputs.spec is None:
        return None, "inputs not readable"
    n_gpus = inputs.layout.devices if inputs.layout else 1
    tokens = inputs.global_batch * inputs.spec.seq
    it = _float(row, "meas_iter_time_s")
    if it:
        return tokens / it / n_gpus, "meas_iter_time_s"
    conv = convention_flops_per_iter(row, inputs.spec, inputs.global_batch)
    tf = _float(row, "meas_tflops_per_gpu")
    if conv and tf:
        return tokens / (conv / (tf * 1e12 * n_gpus)) / n_gpus, "meas_tflops_per_gpu recounted by tflops_metric"
    mfu = _float(row, "meas_mfu_pct")
    if conv and mfu and inputs.hardware and inputs.layout:
        peak = inputs.hardware.peak_flops(inputs.layout.precision)
        return tokens / (conv / (mfu / 100 * peak * n_gpus)) / n_gpus, "meas_mfu_pct recounted by tflops_metric"
    return None, "no measured throughput with a known FLOP convention"
