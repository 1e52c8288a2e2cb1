"""`stride plan calibrate RUNS...`: fit the efficiency factors to measured stride runs.

Each run directory holds `summary.json` (the trainer's: `step_time_s` or `samples_per_s`,
`world_size`) and `config.toml` (the resolved run config). The run's model must be a
transformer the cost model can describe (`ts_transformer`: RMSNorm, SwiGLU, RoPE, a small
multi-horizon head); its layout comes from `[parallel]` and `[train]`. Single-process runs
can only inform the compute factors (gemm, memory); runs with several processes also the
network and overlap factors.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path

from stride.config.errors import ConfigError
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency, load_efficiency
from stride.perfmodel.fit import fit_efficiency
from stride.perfmodel.hardware import Hardware, load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import TransformerSpec

TS_SIZES = {  # mirrors stride.models.registry.TRANSFORMER_SIZES, read without importing torch
    "tiny": {"d_model": 64, "n_layers": 2, "n_heads": 4},
    "small": {"d_model": 128, "n_layers": 4, "n_heads": 4},
    "base": {"d_model": 256, "n_layers": 6, "n_heads": 8},
    "large": {"d_model": 512, "n_layers": 8, "n_heads": 8},
}


def run_inputs(run_dir: Path) -> tuple[TransformerSpec, Layout, int, float]:
    """(spec, layout, global batch, measured step seconds) of one run directory."""
    summ_p, cfg_p = run_dir / "summary.json", run_dir / "config.toml"
    for p in (summ_p, cfg_p):
        if not p.is_file():
            raise ConfigError(f"{run_dir}: missing {p.name}")
    try:
        summary = json.loads(summ_p.read_text())
        cfg = tomllib.loads(cfg_p.read_text())
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{run_dir}: unreadable summary.json/config.toml: {exc}") from None
    model, data, train, par = (cfg.get(k, {}) for k in ("model", "data", "train", "parallel"))
    if model.get("name", "ts_transformer") != "ts_transformer":
        raise ConfigError(f"{run_dir}: model `{model.get('name')}` is not a transformer the cost model describes")
    size = TS_SIZES.get(model.get("size", "tiny"))
    if size is None:
        raise ConfigError(f"{run_dir}: unknown ts_transformer size {model.get('size')!r}")
    d = model.get("d_model") or size["d_model"]
    ffn = int(round((model.get("ffn_mult") or 8 / 3) * d / 8)) * 8
    heads = model.get("n_heads") or size["n_heads"]
    seq = int(data.get("seq_len", 64)) // int(model.get("patch_len", 1))
    n_out = len(data.get("horizons", [1, 5, 20])) * (len(model.get("quantiles", [])) if model.get("loss") == "quantile"
                                                      else 1)
    spec = TransformerSpec(model.get("n_layers") or size["n_layers"], d, heads, heads, ffn, "swiglu", max(1, n_out),
                           seq, name=f"ts_transformer-{model.get('size', 'tiny')}")
    precision = train.get("precision", "fp32")
    rc = {"none": "none", "full": "full"}.get(train.get("activation_checkpointing", "none"), "full")
    dp = int(par.get("dp_replicate", 1)) * int(par.get("dp_shard", 1))
    layout = Layout(dp=dp, tp=int(par.get("tp", 1)), pp=int(par.get("pp", 1)),
                    schedule="1f1b" if int(par.get("pp", 1)) > 1 else "none",
                    zero=3 if int(par.get("dp_shard", 1)) > 1 else 0, sp=int(par.get("tp", 1)) > 1,
                    micro_batch=max(1, int(train.get("batch_size", 64)) // max(1, int(train.get("grad_accum", 1)))
                                    // dp), recompute=rc, precision=precision)
    batch = int(train.get("batch_size", 64))
    step = summary.get("step_time_s")
    if not step and summary.get("samples_per_s"):
        step = batch / summary["samples_per_s"]
    if not step or step <= 0:
        raise ConfigError(f"{run_dir}: summary.json has no step_time_s or samples_per_s")
    return spec, layout, batch, float(step)


def calibrate(run_dirs: list[Path], hw: Hardware, start: Efficiency | None = None) -> tuple[Efficiency, list[dict]]:
    samples, report = [], []
    for rd in run_dirs:
        spec, lay, batch, step = run_inputs(rd)
        tokens = batch * spec.seq / lay.devices
        samples.append(((lambda e, s=spec, la=lay, b=batch: predict(s, la, hw, b, e).tokens_per_s_per_device),
                        tokens / step))
        report.append({"run": str(rd), "layout": lay.short(), "measured_step_s": step})
    multi = any(r["layout"].split()[0] != "dp1" for r in report)
    factors = ("gemm", "memory", "network", "overlap") if multi else ("gemm", "memory")
    eff = fit_efficiency(samples, factors, start, sweeps=8)
    for r, (fn, meas) in zip(report, samples, strict=True):
        pred = fn(eff)
        r["predicted_tokens_per_s_per_device"], r["measured_tokens_per_s_per_device"] = pred, meas
        r["err_pct"] = (pred / meas - 1) * 100
    return eff, report


def calibrate_cli(args: argparse.Namespace) -> int:
    if not args.runs:
        raise ConfigError("stride plan calibrate needs one or more run directories")
    hw = load_catalog(args.hardware_file).get(args.hardware)
    start = load_efficiency(args.efficiency) if args.efficiency else None
    eff, report = calibrate([Path(r) for r in args.runs], hw, start)
    print(json.dumps({"hardware": hw.name, "efficiency": eff.to_dict(), "runs": report}))
    return 0
