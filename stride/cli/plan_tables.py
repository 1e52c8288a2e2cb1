"""Human tables of `stride plan`: the catalog, the presets, predicted rows, a hardware comparison."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from stride.shown_text import add_row, literal  # row ids, hardware names, notes: from a CSV or hardware file


def secs(t: float) -> str:
    """Seconds (or dollars) to three decimals, or three significant digits below 0.1 (a small model's 0.41 ms step
    read "0.000")."""
    return f"{t:.3f}" if t >= 0.1 else f"{t:.3g}"


def _console() -> Console:
    """A terminal's own width; piped output gets 160 columns rather than rich's 80."""
    con = Console()
    return con if con.is_terminal else Console(width=160)


def print_hardware(catalog, as_json: bool = False) -> None:
    rows = []
    for hw in catalog.devices.values():
        rows.append({"name": hw.name, "display_name": hw.display_name, "vendor": hw.vendor, "generation": hw.generation,
                     "peak_tflops": hw.peak_tflops, "memory_gib": hw.memory_gib,
                     "usable_memory_gib": hw.usable_memory_bytes / 2**30, "memory_bw_tbps": hw.memory_bw_tbps,
                     "scaleup_domain": hw.scaleup_domain, "scaleup_bw_gbps": hw.scaleup_bw_gbps,
                     "scaleout_bw_gbps": hw.scaleout_bw_gbps, "tdp_w": hw.tdp_w,
                     "mamf_tflops": hw.mamf_tflops, "matmul_fraction_bf16": hw.matmul_fraction("bf16"),
                     "scaleup_busbw_fraction": hw.scaleup_busbw_fraction,
                     "scaleout_busbw_fraction": hw.scaleout_busbw_fraction,
                     "price_per_hour_usd": hw.price_per_hour_usd, "aliases": list(hw.aliases),
                     "assumed": list(hw.assumed), "source": hw.source})
    if as_json:
        print(json.dumps(rows))
        return
    t = Table(title="hardware catalog (stride/perfmodel/hardware.toml; dense peaks)")
    for col in ("name", "part", "bf16 TF", "best GEMM", "fp8 TF", "fp4 TF", "GiB", "TB/s", "scale-up", "$/h"):
        t.add_column(col, justify="left" if col in ("name", "part") else "right")
    for r in rows:
        p = r["peak_tflops"]
        lowp = [f"{p[k]:g}" if k in p else "-" for k in ("fp8", "fp4")]
        frac = r["matmul_fraction_bf16"]
        best = f"{frac:.0%}" + ("" if "bf16" in r["mamf_tflops"] else "*") if frac else "-"
        add_row(t, r["name"], r["display_name"], f"{p.get('bf16', p.get('fp16', 0)):g}", best, *lowp,
                  f"{r['memory_gib']:g}", f"{r['memory_bw_tbps']:g}",
                  f"{r['scaleup_domain']} x {r['scaleup_bw_gbps']:g} GB/s",
                  f"{r['price_per_hour_usd']:g}")
    _console().print(t)
    print("best GEMM: the published Maximum Achievable Matmul TFLOP/s over the bf16 peak (* assumed: no figure); "
          "sources: stride plan --list-hardware --json (each entry's `source`; `assumed` fields are not vendor data)")


def print_models(as_json: bool = False) -> None:
    from stride.perfmodel.flops import active_params, total_params
    from stride.perfmodel.model_spec import KEY_HELP, PRESETS

    rows = [{"name": n, "layers": s.layers, "hidden": s.hidden, "heads": s.heads, "kv_heads": s.kv_heads, "ffn": s.ffn,
             "act": s.act, "vocab": s.vocab, "seq": s.seq, "experts": s.experts, "top_k": s.top_k,
             "params_b": total_params(s) / 1e9, "active_params_b": active_params(s) / 1e9} for n, s in PRESETS.items()]
    if as_json:
        print(json.dumps(rows))
        return
    t = Table(title="model presets (--model NAME[,key=value...])")
    for col in ("name", "params", "layers", "hidden", "heads/kv", "ffn", "act", "vocab", "seq", "MoE"):
        t.add_column(col, justify="left" if col in ("name", "act") else "right")
    for r in rows:
        moe = f"{r['experts']}e top{r['top_k']} ({r['active_params_b']:.1f}B act.)" if r["experts"] else "-"
        add_row(t, r["name"], f"{r['params_b']:.1f}B", str(r["layers"]), str(r["hidden"]),
                  f"{r['heads']}/{r['kv_heads']}", str(r["ffn"]), r["act"], str(r["vocab"]), str(r["seq"]), moe)
    _console().print(t)
    print(f"or dimensions: --model layers=..,hidden=..,heads=..,vocab=..,seq=..  ({KEY_HELP})")


def print_rows(rows: list[dict]) -> None:
    t = Table(title="predicted rows (80% interval from held-out residuals of the same kind)")
    refused = {r["row_id"]: r["measured_note"] for r in rows if "not scored" in str(r.get("measured_note") or "")}
    measured = refused or any("measured_tokens_per_s_per_gpu" in r for r in rows)
    cols = ["row", "tok/s/gpu", "80% interval", "iter s", "80% interval ", "MFU", "mem GiB", "fits"]
    cols += ["measured tok/s", "error"] if measured else []
    for col in cols:
        t.add_column(col, justify="left" if col == "row" else "right")
    for r in rows:
        if r.get("reason"):
            add_row(t, r["row_id"], literal(f"not modelled: {r['reason']}", "dim"), *[""] * (len(cols) - 2))
            continue
        cells = [r["row_id"], f"{r['tokens_per_s_per_gpu']:,.0f}",
                 f"{r['tokens_per_s_per_gpu_lo']:,.0f} - {r['tokens_per_s_per_gpu_hi']:,.0f}",
                 secs(r['iter_time_s']),
                 f"{secs(r['iter_time_s_lo'])} - {secs(r['iter_time_s_hi'])}", f"{r['mfu'] * 100:.1f}%",
                 f"{r['peak_mem_gib']:.1f}", str(r["fits"])]
        if measured:
            m = r.get("measured_tokens_per_s_per_gpu")
            cells += [f"{m:,.0f}", f"{r['error_pct']:+.1f}%"] if m else \
                [Text("not scored", style="dim") if r["row_id"] in refused else "", ""]
        add_row(t, *cells)
    if not rows:
        t.caption = "0 rows"
    _console().print(t)
    for rid, note in refused.items():  # a measurement that cannot be true is named, never scored as model error
        _console().print(Text.assemble(literal(rid, "yellow"), literal(f": {note}")))
    for r in rows:
        for note in r.get("notes") or []:
            if "repeats row" in note:
                _console().print(Text.assemble(literal(r["row_id"], "yellow"), literal(f": {note}")))
    line = error_summary(rows)
    if line:
        _console().print(literal(line))


def error_summary(rows: list[dict]) -> str | None:
    """One line over the rows that carry a measurement: how many were answered, the median, p90 and signed
    median error of tokens/s per device, and how many measurements the 80% intervals hold (None without any
    measured row). An outside audit found `--from-csv` printing per-row errors and no figure over them."""
    scored = [r for r in rows if r.get("measured_tokens_per_s_per_gpu") and r.get("tokens_per_s_per_gpu")]
    if not scored:
        return None
    from stride.perfmodel.evaluate import error_stats  # as benchmarks/perfmodel_blind.py reckons them

    e = error_stats(r["error_pct"] / 100 for r in scored)
    inside = sum(r["tokens_per_s_per_gpu_lo"] <= r["measured_tokens_per_s_per_gpu"] <= r["tokens_per_s_per_gpu_hi"]
                 for r in scored)
    refused = sum(1 for r in rows if r.get("reason"))
    return (f"{len(scored)} measured rows predicted ({refused} refused): median |error| {e['median_abs_pct']:.1f}%, "
            f"p90 {e['p90_abs_pct']:.1f}%, signed median {e['median_signed_pct']:+.1f}%; the 80% interval holds "
            f"{inside} of {len(scored)} ({100 * inside / len(scored):.0f}%)")


def _small(x: float, decimals: int) -> str:
    """`x` with thousands separators and `decimals` places, or three significant digits where that would print 0 (a
    1e6-token budget read "0.0" hours and "0" dollars; planner audit of 2026-12-07)."""
    return f"{x:,.{decimals}f}" if x == 0 or x >= 10 ** -decimals * 10 else f"{x:.3g}"


def print_compare(rows: list[dict], name: str, tokens: float, sort: str, seconds: float,
                  precision: str = "bf16") -> None:
    t = Table(title=literal(f"{name}: time and cost to {tokens:.3g} tokens, best layout per fleet, by {sort} "
                            f"({seconds:.2f} s)"))
    # as the plan's table: MFU over the peak of the precision the GEMMs run in, named where not the 16-bit one (an fp4
    # fleet's 21.7 % read beside bf16 figures as a poor fit; planner audit of 2026-12-07)
    mfu_col = "MFU" if precision in ("bf16", "fp16") else f"MFU ({precision} peak)"
    for col in ("#", "hardware", "devices", "global batch", "best layout", "tok/s/dev", mfu_col, "hours",
                "80% interval", "cost $"):
        t.add_column(col, justify="left" if col in ("hardware", "best layout") else "right")
    for i, r in enumerate(rows, 1):
        if "reason" in r:
            add_row(t, "-", r["hardware"], str(r["devices"]), "", literal(r["reason"], "dim"), "", "", "", "", "")
        else:
            add_row(t, str(i), r["hardware"], str(r["devices"]), f"{r['global_batch']:,}", r["layout"],
                    f"{r['tokens_per_s_per_device']:,.0f}", f"{r['mfu'] * 100:.1f}%", _small(r['hours_to_budget'], 1),
                    f"{_small(r['hours_to_budget_lo'], 1)} - {_small(r['hours_to_budget_hi'], 1)}",
                    _small(r['cost_to_budget_usd'], 0))
    batches = {r["global_batch"] for r in rows if "reason" not in r}
    if len(batches) > 1:  # each fleet at its own default: larger fleets ran larger steps (outside audit of the planner)
        t.caption = ("the fleets ran different global batches (each its default, devices x a power of two): a larger "
                     "batch hides communication and can train worse; pass --global-batch N to compare at one")
    _console().print(t)
    for r in rows:  # a default batch far past its target (planner.default_batch_note)
        if r.get("note"):
            _console().print(literal(f"note: {r['hardware']} x {r['devices']}: {r['note']}"))
