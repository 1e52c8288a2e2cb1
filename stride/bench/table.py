"""The suite's closing table."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from stride.bench.scaling import host_mfu, host_mfu_note, oversubscribed_entries
from stride.bench.stats import spread_text
from stride.metrics.contention import entry_contention, entry_waiting_threads
from stride.shown_text import add_row, literal, plain  # names and units come from results (input)


def results_table(results: dict[str, Any]) -> Table:
    table = Table(title=literal(f"stride bench: {results['suite']} suite"))
    # one statistic per row: MFU is at the step time of the median throughput, not at the mean step time
    for col in ("workload", "throughput (median)", "cv", "MFU (at median)", "peak mem", "step time: phase shares",
                "val loss", "to target"):
        table.add_column(col, justify="left" if col == "workload" else "right", no_wrap=True)
    over = oversubscribed_entries(results)
    for w in results["workloads"]:
        t = w["throughput"]
        b = w["step_time_breakdown_s"]
        total = sum(b.values()) or 1.0
        short = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}
        parts = " ".join(f"{short.get(k, k)} {100 * v / total:.0f}%" for k, v in b.items() if v / total >= 0.01)
        ttt = w["time_to_target_s"]
        add_row(
            table, w["name"],
            f"{t['median']:,.0f} {t['unit']}" if t["median"] else "-",
            spread_text(t),
            _mfu_cell(w, over.get(w["name"])),
            f"{w['peak_mem_bytes'] / 2**20:,.0f} MiB",
            parts,
            f"{w['final_val_loss']:.4f}" if w.get("final_val_loss") is not None else "-",
            f"{ttt:.1f} s" if ttt is not None else ("missed" if w.get("target_val_loss") is not None else "-"),
        )
    host = f"\n{note}" if (note := host_mfu_note(results)) else ""
    table.caption = literal(("throughput and MFU: the median of each workload's throughput figures and MFU at that "
                             "same step time (results.json `rates_at`); phase shares: "
                             "mean over the timed steps") + host + noisy_note(results["workloads"]), lines=True)
    return table


def _mfu_cell(w: dict[str, Any], point: dict[str, Any] | None) -> str:
    """MFU in percent; an oversubscribed world point's over the host's real peak (`host_mfu`), marked: 4 ranks on 2
    cores each divided by a core of its own, and read half the host's figure."""
    if w["mfu"] is None:
        return "-"
    if point is not None and (v := host_mfu(w["mfu"], point)) is not None:
        return f"{100 * v:.1f}% (host peak)"
    # a results.json of an older stride holds MFU at the mean step time: said in the cell
    return f"{100 * w['mfu']:.1f}%" + ("" if w.get("rates_at") else " (at mean)")


NOISY_CV = 0.10  # a quiet 2-core host reads cv 0.3-3% (docs/bench.md); above this the host was busy


def noisy_note(workloads: list[dict[str, Any]]) -> str:
    """A line for the workloads whose throughput spread says the host was busy: a cv of 20-69% read like any other
    figure (outside audit 12). Empty where every cv is at most NOISY_CV."""
    noisy = [f"{plain(w['name'])} {100 * w['throughput']['cv']:.0f}%" for w in workloads
             if (w["throughput"].get("cv") or 0.0) > NOISY_CV]
    # a steady but starved run has a tight spread: its threads' wait for cores says it (audit 21, H1: 500x slow at
    # a 1.4 % cv)
    starved = [f"{plain(w['name'])} {v:.2f}" for w in workloads
               if entry_contention(w) and (v := entry_waiting_threads(w)) is not None]
    out = ""
    if noisy:
        out += (f"\nspread above {100 * NOISY_CV:.0f}% ({', '.join(noisy)}): the host was busy while these ran; "
                "their figures do not compare with a quiet run's (rerun, or compare with `stride compare`, which "
                "widens its noise band by the spread)")
    if starved:
        out += (f"\nthreads waiting for cores ({', '.join(starved)} threads on average; results.json "
                "`contention_note` says whose): these figures are of a contended host and can be tens of times slow, "
                "whatever their spread (rerun on a quiet host, or with fewer train.threads)")
    return out


def tradeoff_table(workload: str, matrix: dict[str, dict[str, Any]]) -> Table:
    table = Table(title=literal(f"tradeoffs: {workload} (ratios against baseline)"))
    for col in ("variant", "speed", "peak mem", "activations", "val loss", "Δ val loss", "skipped steps",
                "bitwise repeatable"):
        table.add_column(col, justify="left" if col == "variant" else "right", no_wrap=True)

    def f(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    for v, m in matrix.items():
        add_row(table, v, f(m["speed_ratio"], ".2f") + "x", f(m["mem_ratio"], ".2f") + "x",
                      f(m["activation_ratio"], ".2f") + "x", f(m["final_val_loss"], ".4f"),
                      f(m["val_loss_delta"], "+.4f"), str(m["skipped_steps"]),
                      "yes" if m["bitwise_repeatable"] else "no")
    return table


def scaling_table(scaling: dict[str, Any]) -> Table:
    """Efficiency per strategy, mode and process count, with how the ranks sat on the cores."""
    table = Table(title="scaling (efficiency 1.0 = ideal; in brackets: range of per-round pairs with the baseline)")
    cols = ("workload", "par.", "mode", "N", "batch rank/all", "throughput", "speed-up", "efficiency",
            "exp. comm", "fwd/sample", "core wait", "ranks/cores")
    for col in cols:
        table.add_column(col, justify="left" if col in ("workload", "par.", "mode", "ranks/cores") else "right",
                         no_wrap=col != "workload", overflow="fold")

    def f(v: Any, spec: str, suffix: str = "") -> str:
        return "-" if v is None else format(v, spec) + suffix

    for p in scaling["points"]:
        rounds = [e for e in p.get("efficiency_rounds") or [] if e is not None]
        rng = f" ({min(rounds):.2f}-{max(rounds):.2f})" if len(rounds) > 1 and p["scaling"] != "baseline" else ""
        n = p["world_size"]
        cores = f"{n}/{p.get('cores', '?')}" + (" OVERSUB." if p["oversubscribed"] else "")
        t = p["throughput"]
        add_row(table, p["workload"], p["strategy"], p["scaling"], str(n), f"{p['per_rank_batch']}/{p['global_batch']}",
                      f"{f(t['median'], ',.0f')} {t['unit']}", f(p["speedup"], ".2f", "x"),
                      f(p["efficiency"], ".2f") + rng,
                      f(p["exposed_comm_fraction"] and 100 * p["exposed_comm_fraction"], ".1f", "%"),
                      f(p.get("forward_time_per_sample_ratio"), ".2f", "x"),
                      f(p.get("runqueue_wait_share") and 100 * p["runqueue_wait_share"], ".0f", "%"), cores)
    notes = [plain(f"N={n}: {d}") for n, d in (scaling.get("pinning") or {}).items()]
    notes += ["exp. comm: DDP step time waiting on all-reduce; fwd/sample: forward time per sample vs 1 rank "
              "(DDP forward holds no gradient traffic but broadcasts module buffers, a sync point, if any); "
              "core wait: share of the time ranks were ready to run but another process held the core (each "
              "rank's life): high = busy machine, the efficiency then measures the load"]
    table.caption = literal("\n".join(notes), lines=True)
    return table


def ttt_line(name: str, r: dict[str, Any]) -> str:
    """One line for `--sweep ttt`: the median over every seed (a miss counted as never), then the seeds that reached
    the target (median, min, max) and how many missed. The hits' median alone read as the time to target while a
    third of the seeds never got there."""
    sec, runs, missed, target = r["seconds"], r["runs"], r["missed"], r["target_val_loss"]
    goal = "?" if target is None else format(target, "g")
    if sec["median"] is None:
        return plain(f"  {name}: time to val loss {goal}: no run reached it; missed {missed} of {runs}")
    hits = f"median {sec['median']:.1f} s (min {sec['min']:.1f} s, max {sec['max']:.1f} s)"
    if not missed:
        return plain(f"  {name}: time to val loss {goal}: {hits}; missed 0 of {runs}")
    every = r.get("median_all_s")
    every_text = f"{every:.1f} s" if every is not None else "not reached"
    return plain(f"  {name}: time to val loss {goal}: median over all {runs} seeds, a miss counted as never: "
                 f"{every_text}; the {runs - missed} that reached it: {hits}; missed {missed} of {runs}")
