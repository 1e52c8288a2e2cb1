"""The closing summary table of a training run (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from stride.shown_text import add_row, literal


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def _fmt(v: Any, spec: str = ".4g") -> str:
    return "-" if v is None else format(v, spec)


def _time_to_target(s: dict[str, Any]) -> str:
    ttt = s.get("time_to_target_s")
    if ttt is not None:
        return f"{ttt:.2f} s"
    if s.get("target_val_loss") is not None and isinstance(s.get("time_note"), str):
        return "unknown (see the note below)"  # resumed from a checkpoint without the run's clock
    return "-"


def summary_table(s: dict[str, Any]) -> Table:
    """One process: the figures unlabelled. N ranks: the title names the world size and layout, and each figure says
    whether it is the whole job's, one rank's, or the fullest rank's (outside audit 11: an unlabelled table mixed
    the job's samples/s with one rank's FLOP/s and rank 0's memory). Every cell is a Text: the name, phases and
    sources come from a config or a summary.json, shown as written (`lstm[bs=64]` is not markup)."""
    world = int(s.get("world_size") or 1)
    many = world > 1
    title = f"stride train: {s.get('name', '')}"
    if many:
        title += f" ({world} ranks, {s.get('parallel') or 'parallel'})"
    table = Table(title=literal(title), show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    job, rank = (" (all ranks)", " (per rank)") if many else ("", "")
    mem_where = f", max over {world} ranks: rank {s.get('peak_mem_rank', 0)}" if many else ""
    rows = [
        ("steps", str(s["steps"])),
        ("final train loss", _fmt(s["final_train_loss"])),
        ("final val loss", _fmt(s["final_val_loss"])),
        (f"samples/s{job}", _fmt(s["samples_per_s"], ",.0f")),
        (f"timesteps/s{job}", _fmt(s["timesteps_per_s"], ",.0f")),
        ("step time", _fmt(s["step_time_s"] * 1e3 if s["step_time_s"] else None, ".2f") + " ms"),
        (f"achieved FLOP/s{rank}", _fmt(s["achieved_flops_per_s"], ".3e")),
        (f"MFU{rank}", Text("n/a: the peak is below what this run achieved (mfu_error)", style="bold red")
         if s.get("mfu_error") else _fmt(s["mfu"] * 100 if s["mfu"] is not None else None, ".2f") + " %"),
        (f"peak FLOP/s{rank} (source)", f"{_fmt(s['peak_flops_per_s'], '.3e')} ({s['peak_flops_source']})"),
        (f"peak memory ({s['peak_mem_kind']}{mem_where})", _fmt_bytes(s["peak_mem_bytes"])),
        # rank 0's own (its data-parallel slice), as it was unlabelled beside the job's samples/s (outside audit of the
        # layouts: 2 DDP ranks showed half a one-process run's figure)
        (f"saved activations{' (rank 0)' if many else ''}", _fmt_bytes(s.get("saved_activation_bytes"))),
        ("time to target", _time_to_target(s)),
    ]
    lost = s.get("lost_time_s")
    if isinstance(lost, (int, float)) and lost > 0:  # outside the goodput clock above: trained twice after a crash
        rows.append(("lost to crashes", f"{lost:.2f} s (trained past the last checkpoint by a killed process, then "
                                        "again; not in time to target)"))
    for note in s.get("data_changed_in_place") or ():
        rows.append(("data changed", Text(f"{note} during the run: later batches read its new bytes",
                                          style="bold red")))
    total = s["step_time_s"] or 1.0
    for phase, sec in s["step_time_breakdown_s"].items():
        rows.append((f"  {phase}", f"{sec * 1e3:.2f} ms ({100 * sec / total:.1f} %)"))
    for k, v in rows:
        add_row(table, k, v)
    return table


def print_summary(s: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(s))
    for key in ("timing_note", "time_note"):
        # timing_note: warm-up steps only, the figures above are not steady-state; time_note: the run's training
        # time before this process is unknown (stride.train.summary)
        note = s.get(key)
        if isinstance(note, str):
            console.print(Text.assemble(("warning:", "bold yellow"), " ", literal(note)))
