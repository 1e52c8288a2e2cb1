"""`stride plan`: predict step time, memory and cost; recommend a layout and hardware.

  stride plan --model llama3-8b --hardware h100 --devices 64 [--global-batch B] [--seq S] [--json]
  stride plan --model llama3-70b --compare-hardware h100-sxm:64,h200:64,a100-80gb:128 --tokens 1e11 [--sort cost]
  stride plan --from-csv data/perfmodel/published_dev.csv --json
  stride plan --list-hardware | --list-models
  stride plan --workload ts_transformer_small|run.toml [--set key=value] --hardware local-cpu --devices 2
  stride plan probe --out local.toml [--threads 1] [--comm-profile gloo.toml]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import time
from pathlib import Path

from stride.config.errors import ConfigError


def register(parser: argparse.ArgumentParser) -> None:
    # no argparse `choices`: with them a mistyped option's value ("--devcies 8") was reported as an invalid action
    # "8" and the option never named (audit 21, L1); without, argparse names the unknown option, and _run the action
    parser.add_argument("action", nargs="?", metavar="{calibrate,probe}",
                        help="calibrate: fit factors from runs; probe: measure this machine into a hardware TOML "
                             "(default: none, plan)")
    parser.add_argument("runs", nargs="*", help="run directories (with summary.json) for `calibrate` (default: none)")
    parser.add_argument("--model", help="preset (llama3-8b, gpt3-175b, ...) or layers=..,hidden=..,heads=..,... "
                        "(no default: a plan needs --model or --workload)")
    parser.add_argument("--workload", help="a stride workload to trace: bench workload name or run config TOML "
                        "(default: none)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for --workload (repeatable; default: none)")
    parser.add_argument("--hardware", default="h100-sxm",
                        help="device name from the catalog, or a part as a published row describes it, read the "
                        "way --from-csv reads its gpu column: 'H100 SXM 96GB @ 500 W' (default: %(default)s)")
    parser.add_argument("--hardware-file", help="extra/override hardware TOML on top of the shipped catalog "
                        "(default: none, only stride/perfmodel/hardware.toml)")
    parser.add_argument("--devices", type=int, help="number of devices, >= 1 (no default: a --model or --workload "
                        "plan needs it, --compare-hardware unless every NAME has its :COUNT)")
    parser.add_argument("--global-batch", type=int, help="sequences per step, >= 1 (default: about 4M tokens, "
                        "--devices times a power of two or three times one, so every replica's batch splits into "
                        "micro-batches; --workload: the config's train.batch_size)")
    parser.add_argument("--seq", type=int, help="sequence length, >= 1 (default: the model's)")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp8", "fp4", "tf32", "fp32"],
                        help="training precision (default: %(default)s)")
    parser.add_argument("--fp8-recipe", default="delayed",
                        help="fp8: delayed | current | tensorwise | rowwise | rowwise_gw_hp | mxfp8 (fp4: nvfp4) "
                             "(default: %(default)s)")
    parser.add_argument("--framework", default=None,
                        help="framework profile: megatron, megatron-legacy, deepspeed, ddp, fsdp1, fsdp2, torchtune, "
                             "maxtext (default: maxtext on a TPU, else megatron)")
    parser.add_argument("--efficiency", help="calibration JSON with efficiency factors (default: the shipped "
                        "data/perfmodel/efficiency.json)")
    parser.add_argument("--top", type=int, default=8, help="rows of the ranked table, >= 1 (default: %(default)s)")
    parser.add_argument("--compare-hardware", nargs="?", const="all", metavar="NAME:COUNT,...",
                        help="rank device types by time/cost to --tokens: h100-sxm:64,h200:64 (bare: every "
                             "catalog accelerator at --devices, CPUs left out; default: off)")
    parser.add_argument("--tokens", type=float, default=1e12,
                        help="token budget for --compare-hardware, > 0 (default: %(default)g)")
    parser.add_argument("--sort", choices=["time", "cost"], default="time",
                        help="--compare-hardware ranking (default: %(default)s)")
    parser.add_argument("--list-hardware", action="store_true", help="print the hardware catalog (default: off)")
    parser.add_argument("--list-models", action="store_true", help="print the model presets (default: off)")
    parser.add_argument("--from-csv", help="predict every row of a published-results CSV (default: none)")
    parser.add_argument("--json", action="store_true", help="machine-readable output (default: off, tables)")
    parser.add_argument("--out", help="probe: write the hardware TOML here (default: none, printed only)")
    parser.add_argument("--threads", type=int, default=1, help="probe: intra-op threads, >= 1 (default: %(default)s)")
    parser.add_argument("--name", default="local-cpu", help="probe: catalog name of the entry (default: %(default)s)")
    parser.add_argument("--comm-profile", help="probe: a `stride comm --profile-out` TOML to reference "
                        "(default: none)")
    parser.set_defaults(func=run)


def _eff(args, catalog=None):
    from stride.perfmodel.efficiency import load_efficiency, read_json, shipped_efficiency

    if not args.efficiency:
        return shipped_efficiency()
    _refuse_empty(args.efficiency)
    data = read_json(args.efficiency)  # once: the factors and the part they were measured on
    eff = load_efficiency(args.efficiency, note="stride plan", data=data)  # factors it does not set: the shipped fit's
    _warn_other_hardware(args, catalog, data.get("hardware") if isinstance(data, dict) else None)
    return eff


def _refuse_empty(path: str) -> None:
    """An empty --efficiency file is most often the `> eff.json` of a `stride plan calibrate` that refused (its
    error says why, and the shell's redirection left the file): say that, rather than the JSON parser's
    `Expecting value: line 1 column 1 (char 0)` (first-contact audit of 2026-12-07)."""
    with contextlib.suppress(OSError):
        if Path(path).is_file() and Path(path).stat().st_size == 0:
            raise ConfigError(f"{path}: the efficiency file is empty: it is the JSON `stride plan calibrate RUNS ... > "
                              f"{path}` prints, and a calibrate that refused (its error says why) leaves the "
                              "redirected file empty; rerun the calibrate, or drop --efficiency")


def _warn_other_hardware(args, catalog, measured_on: object) -> None:
    """Factors from `stride plan calibrate` hold for the part they were measured on: say so when a plan
    applies them to another part (a local-cpu calibration on an H100 plan went by without a word)."""
    import sys

    if not measured_on:
        return
    target = args.hardware
    if catalog is not None:
        with contextlib.suppress(ConfigError):
            target = catalog.get(args.hardware).name  # an alias ("h100") names the calibrated part too
    targets = {target} if not (args.from_csv or args.compare_hardware) else set()
    if targets != {measured_on}:
        where = args.hardware if targets else "every row's own part"
        print(f"stride plan: warning: {args.efficiency} was calibrated on {measured_on}; applied to {where}, its "
              "factors are an assumption, not a measurement", file=sys.stderr)


# words that say the text describes the network between nodes (its scale-out), not the part: read for its bandwidth.
# "8 GPUs per node" counts devices, not a link
_LINK_WORDS = re.compile(r"infiniband|\bib\b|roce|ethernet|\d*\s*gbe\b|\befa\b|scale-?out|\bnics?\b|"
                         r"(?<!gpus )(?<!gpu )(?<!devices )(?<!chips )(?<!accelerators )per node", re.I)


def _link_text(text: str) -> str:
    """The part of a --hardware text that describes its network, as hw_text.link_gbytes_per_device reads it: the
    comma/semicolon-separated pieces with link words, without the part's memory bandwidth ("3.35TB/s") or
    scale-up link figures ("NVLink 900 GB/s"). Port speeds ("25GbE") the link reader reads itself."""
    pieces = [p for p in re.split(r"[;,]", text) if _LINK_WORDS.search(p)]
    out = ", ".join(pieces) if pieces else text
    out = re.sub(r"\d+(?:\.\d+)?\s*TB(?:/\s*s|ps)\b", " ", out)  # bytes per second in T: the memory, not a NIC
    return re.sub(r"(?i)(?:nvlink|nvswitch|xgmi|infinity fabric)\S*(?:\s+\S+){0,3}?\s*\d+(?:\.\d+)?\s*[GT]B"
                  r"(?:/\s*s|ps)\b", " ", out)


def _scaleout(hw, text: str, notes: list[str]):
    """`hw` with the scale-out bandwidth a --hardware text states ("8x HDR InfiniBand 200 Gb/s per node",
    "1x 25GbE per node", "scale-out 1 GB/s"); the text naming a network whose rate cannot be read is an error,
    never the catalog's network planned as if the text had not been written."""
    import dataclasses

    from stride.perfmodel.hw_text import link_gbytes_per_device

    word = _LINK_WORDS.search(text)
    if not word:
        return hw
    try:
        gbytes = link_gbytes_per_device(_link_text(text), hw.scaleup_domain)
    except ValueError as exc:  # a count of 0, a NaN rate: one line naming the text
        raise ConfigError(f"--hardware: {exc}") from None
    if not gbytes or gbytes <= 0 or not math.isfinite(gbytes):
        if any("scale-out" in n for n in notes):  # an instance type already set it (hw_text.resolve)
            return hw
        raise ConfigError(f"--hardware {text!r}: names a network ({word.group(0).strip()!r}) but states no "
                          "bandwidth stride can read; write its rate, e.g. '8x NDR InfiniBand 400 Gb/s per node', "
                          "'1x 25GbE per node' or 'scale-out 50 GB/s per GPU' (GB: bytes, Gb: bits)")
    notes.append(f"scale-out {gbytes:.4g} GB/s per device per direction from the text (catalog "
                 f"{hw.scaleout_bw_gbps:g}; {hw.scaleup_domain} devices a node)")
    name = hw.display_name if text in hw.display_name else f"{hw.display_name} [{text}]"
    return dataclasses.replace(hw, scaleout_bw_gbps=gbytes, display_name=name)


def _device(catalog, text: str, quiet: bool = False):
    """(part, notes): the part `--hardware` names: a catalog name or alias, or a description the way published
    rows write one (memory, bandwidth, a power cap, a TFLOP/s figure modify the catalog part; hw_text.resolve,
    the reader of --from-csv's gpu column), and its network ("8x HDR InfiniBand 200 Gb/s per node": the scale-out
    bandwidth). What the text changed is returned as notes (printed to stderr unless `quiet`: a table prints
    them under its header); text that cannot be read is an error naming it, never a silent catalog part ("B200
    (power limited)" without the limit's value)."""
    import sys

    from stride.perfmodel.hw_text import DESCRIBE_EXAMPLE, resolve

    _unread_figures(text)
    try:
        hw, notes = resolve(text, catalog)
    except ValueError as exc:
        if "not a part the catalog knows" in str(exc):  # a part it knows to be missing (B100) says so itself
            raise ConfigError(f"--hardware: unknown hardware `{text}`{catalog.suggest(text)}; known: "
                              f"{', '.join(catalog.names())}; add it with --hardware-file, or describe it from a "
                              f"catalog part ({DESCRIBE_EXAMPLE})") from None
        raise ConfigError(f"--hardware: {exc}") from None
    hw = _scaleout(hw, text, notes)
    hw = _display_memory(hw, catalog)
    if not quiet:
        for note in notes:
            print(f"stride plan: note: --hardware {text!r}: {note}", file=sys.stderr)
    return hw, notes


# a figure in exponent notation ("1e30 TFLOPS", "1e30 TB/s", "@ 1e30 W"): the text readers take plain digits only
# (memory aside, which reads and range-checks "1e3GB"), so such a figure was skipped and the catalog part planned
# without a word (planner audit of 2026-12-07). "v5e-256" is a name: a letter before the digit
_EXPONENT_FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?e[+-]?\d+)(?!\s*gi?b\b(?!/| ?/s|ps))\s*([a-z/$%@]*)")
# a price: nothing in a --hardware text sets one ("H100 $-3/h" planned at the catalog's $3 without a word)
_PRICE_WORDS = re.compile(r"\$|\busd\b|/\s*(?:h|hr|hour)\b|\bper\s+hour\b|\bprice\b")


def _unread_figures(text: str) -> None:
    """Refuse, naming the figure, what a --hardware text states that the readers would skip: a figure in exponent
    notation, or a price (it belongs in a --hardware-file entry's price_per_hour_usd)."""
    low = (text or "").lower()
    m = _EXPONENT_FIGURE.search(low)
    if m:
        unit = f" {m.group(2)}" if m.group(2) else ""
        raise ConfigError(f"--hardware {text!r}: {m.group(1)!r}{unit} is written with an exponent, which the "
                          "--hardware reader does not take for a peak, bandwidth or power figure; write it in plain "
                          "digits (e.g. '989 TFLOPS', '3.35TB/s', '@ 500 W'), or leave it out to take the catalog's")
    if _PRICE_WORDS.search(low):
        raise ConfigError(f"--hardware {text!r}: states a price, which a --hardware text does not set (the plan would "
                          "use the catalog's); give it as price_per_hour_usd (a number >= 0, USD per device-hour) in a "
                          "--hardware-file entry")


def _display_memory(hw, catalog):
    """A part whose memory the text changed is named with that memory: "NVIDIA H100 SXM5 80GB [H100 SXM 96GB @ 500
    W]" said 80GB of a 96 GB plan."""
    import dataclasses

    base = catalog.devices.get(hw.name)
    if base is None or abs(base.memory_gib - hw.memory_gib) < 0.5:
        return hw
    head, sep, tail = hw.display_name.partition(" [")
    new = re.sub(rf"\b{base.memory_gib:g}\s*GB\b", f"{hw.memory_gib:g}GB", head)
    if new == head:
        new = f"{head} {hw.memory_gib:g}GB"
    return dataclasses.replace(hw, display_name=new + sep + tail)


def _assumed_collectives(hw, devices: int) -> list[str]:
    """A note where a multi-rank plan's collectives rest on an assumed link rather than a measured profile: on a
    CPU host the assumed 64 GB/s priced a 2-rank gloo all-reduce of 561 KB at 0.01 ms where the host measured
    about 1.9 ms (an outside audit: a 1.8x predicted speed-up from 2 ranks against 1.07x measured)."""
    if devices <= 1 or hw.collectives or "scaleup_bw_gbps" not in hw.assumed:
        return []
    how = ("measure them: `stride comm --profile-out comm.toml`, then `stride plan probe --comm-profile comm.toml`"
           if hw.cpu else "a `comm_profile` of measured collectives in a --hardware-file entry replaces it")
    return [f"collectives across the {devices} devices use the assumed link of {hw.scaleup_bw_gbps:g} GB/s, not a "
            f"measurement; {how}"]


def _assumed_price(hw) -> list[str]:
    """A note where a `stride plan probe` entry's cost rests on a price it does not set: the probe measures no price,
    so the entry inherits its base part's assumed one ($1.0 a device-hour from epyc-9654), and a --workload plan
    showed that cost with no word (an outside audit of local calibration)."""
    if not hw.probed_threads or "price_per_hour_usd" not in hw.assumed or hw.price_per_hour_usd <= 0:
        return []
    return [f"cost is priced at {hw.price_per_hour_usd:g} USD a device-hour, an assumed figure ({hw.name} is a "
            "`stride plan probe` entry, which measures no price and inherits its base part's): give this machine's "
            "hourly cost as price_per_hour_usd in the hardware file, and take it off `assumed`, to compare by cost"]


def _hardware_lines(text: str, notes: list[str]) -> list[str]:
    """What a --hardware text changed, for a table's header: the text, then one line each."""
    return [f"  --hardware {text!r} read as:", *(f"    {n}" for n in notes)] if notes else []


# --- options given that the chosen mode does not read -----------------------------------------------------------

_MODE_WORDS = {"calibrate": "`stride plan calibrate`", "probe": "`stride plan probe`",
               "list": "--list-hardware/--list-models", "csv": "--from-csv (each row states its own)",
               "workload": "--workload (the run config sets it; change it with --set)",
               "compare": "--compare-hardware", "plan": "a --model plan"}
# every dest a mode may read; json is read by all (calibrate always prints JSON) and so never noted
_OPTIONS = ("model", "workload", "overrides", "hardware", "hardware_file", "devices", "global_batch", "seq",
            "precision", "fp8_recipe", "framework", "efficiency", "top", "compare_hardware", "tokens", "sort",
            "list_hardware", "list_models", "from_csv", "out", "threads", "name", "comm_profile", "runs")


def _mode(args: argparse.Namespace) -> str:
    """Which of run()'s branches these arguments take, in run()'s order."""
    if args.action:
        return args.action
    if args.list_hardware or args.list_models:
        return "list"
    if args.from_csv:
        return "csv"
    if args.workload:
        return "workload"
    return "compare" if args.compare_hardware else "plan"


def _used(args: argparse.Namespace, mode: str) -> set[str]:
    """The options `mode` reads with these arguments."""
    plan_common = {"hardware_file", "efficiency"}
    if mode == "calibrate":
        return {"runs", "hardware", "hardware_file", "efficiency"}
    if mode == "probe":
        return {"out", "threads", "name", "comm_profile"}
    if mode == "list":
        return {"list_hardware", "list_models"} | ({"hardware_file"} if args.list_hardware else set())
    if mode == "csv":
        return {"from_csv"} | plan_common
    if mode == "workload":
        return {"workload", "overrides", "hardware", "devices", "global_batch", "top"} | plan_common
    model = {"model", "global_batch", "seq", "precision", "framework"} | plan_common
    if mode == "compare":  # the fleet names the parts; every row is listed; compare_hardware takes no recipe
        used = model | {"compare_hardware", "tokens", "sort"}
        if args.compare_hardware == "all" or _fleet_needs_devices(args):
            used.add("devices")
        return used
    return model | {"hardware", "devices", "top"} | ({"fp8_recipe"} if args.precision == "fp8" else set())


def _fleet_needs_devices(args: argparse.Namespace) -> bool:
    from stride.perfmodel.planner import parse_fleet

    try:
        return any(count is None for _, count in parse_fleet(args.compare_hardware, []))
    except ConfigError:
        return True  # refused later, naming the entry


def _why(dest: str, args: argparse.Namespace, mode: str) -> str:
    if dest == "fp8_recipe" and mode == "plan":
        return f"only --precision fp8 reads it (this plan is {args.precision}; fp4 uses nvfp4)"
    if dest == "fp8_recipe" and mode == "compare":
        return "--compare-hardware plans each part with the default recipe"
    if dest == "devices" and mode == "compare":
        return "every --compare-hardware entry has its :COUNT"
    if dest == "hardware" and mode == "compare":
        return "--compare-hardware names the parts"
    if dest == "top" and mode == "compare":
        return "--compare-hardware lists every fleet"
    if dest in ("out", "threads", "name", "comm_profile"):
        return "only `stride plan probe` reads it"
    if dest in ("tokens", "sort"):
        return "only --compare-hardware reads it"
    if dest == "runs":
        return "only `stride plan calibrate` reads run directories"
    return f"not used by {_MODE_WORDS[mode]}"


def _flag(dest: str) -> str:
    return {"overrides": "--set", "runs": "RUNS"}.get(dest, "--" + dest.replace("_", "-"))


def unused_options(args: argparse.Namespace) -> list[str]:
    """One line for each option the user gave (its value differs from the parser's default) that the mode these
    arguments take does not read: `--fp8-recipe rowwise` on a bf16 plan, `--tokens` without --compare-hardware,
    `--model` beside --workload went by without a word."""
    parser = argparse.ArgumentParser(add_help=False)
    register(parser)
    defaults = vars(parser.parse_args([]))
    mode = _mode(args)
    used = _used(args, mode)
    lines = []
    for dest in _OPTIONS:
        value = getattr(args, dest, defaults.get(dest))
        if dest in used or value == defaults.get(dest) or value in (None, [], False):
            continue
        shown = ("" if value is True else " " + " ".join(map(str, value)) if isinstance(value, list)
                 else f" {value:g}" if isinstance(value, float) else f" {value}")
        lines.append(f"{_flag(dest)}{shown} is ignored: {_why(dest, args, mode)}")
    return lines


# --- a precision the part has no peak for ---------------------------------------------------------------------

_NO_PEAK = re.compile(r"has no (\w+) peak \(it lists: ([^)]*)\)")


def _precision_hint(message: str, workload: bool = False) -> str:
    """`message` with the precision to pass where it says a part has no peak for the one asked ("hardware `v100`
    has no bf16 peak (it lists: fp16, fp32, fp64)" -> "...; pass --precision fp16")."""
    m = _NO_PEAK.search(message)
    if not m or "--precision" in message or "train.precision" in message:
        return message
    have = {d.strip() for d in m.group(2).split(",")}
    order = ("bf16", "fp16", "fp32") if workload else ("bf16", "fp16", "fp8", "fp4")
    pick = next((d for d in order if d in have and d != m.group(1)), None)
    if pick is None:
        return message
    how = f"--set train.precision={pick}" if workload else f"--precision {pick}"
    return f"{message}; pass {how}"


# ceilings far above any real job (audit 22, F3: --devices 1e20 searched for minutes); the planner's `MAX_DEVICES`
PLAN_LIMITS = {"devices": 1 << 20, "global_batch": 1 << 30, "seq": 1 << 26}
PLAN_LIMIT_WHY = {"devices": "the largest training clusters hold about 10^5", "global_batch": "sequences a step",
                  "seq": "tokens a sequence"}


def _check_numbers(args: argparse.Namespace) -> None:
    """A number outside its range is an error naming the option: 0 is a value, not "not given" (`--global-batch 0`
    became the default batch, `--tokens -1` printed negative hours)."""
    for dest in ("devices", "global_batch", "seq", "top", "threads"):
        value = getattr(args, dest)
        if value is not None and value < 1:
            raise ConfigError(f"--{dest.replace('_', '-')} must be >= 1, got {value}")
        most = PLAN_LIMITS.get(dest)
        if value is not None and most is not None and value > most:  # the layout search walks divisors: 1e20 hung
            raise ConfigError(f"--{dest.replace('_', '-')} must be at most {most:,} ({PLAN_LIMIT_WHY[dest]}), got "
                              f"{value:.3g}")
    if args.tokens is not None and not (math.isfinite(args.tokens) and args.tokens > 0):
        raise ConfigError(f"--tokens must be a finite number > 0, got {args.tokens:g}")
    if args.compare_hardware is not None and not args.compare_hardware.strip(" ,"):
        raise ConfigError("--compare-hardware names no part: give catalog names as NAME[:COUNT],... "
                          "(see --list-hardware), or `all`")


def _interval(table, hw, args: argparse.Namespace, moe: bool) -> tuple[float, float, str]:
    """(lo, hi) multipliers of a predicted time on `hw` and which residuals they come from: the 80% interval of
    the run's kind in `table` (the shipped intervals.py table), as `--from-csv` rows get it."""
    from stride.perfmodel.intervals import run_kind, time_factors
    from stride.perfmodel.planner import default_framework

    framework = args.framework or default_framework(hw)
    q10, q90, basis = table.bounds(run_kind(hw.generation or hw.name, args.precision, framework, moe))
    return (*time_factors(q10, q90), basis)


def _memory_check(table, result, hw) -> dict | None:
    """How sure a fit is: the 80% interval of each ranked layout's peak from the model's held-out memory error
    (intervals.py), and the fastest layout whose upper end still fits. The model's memory errs by 16% (median) on
    published runs and leans low, so a plan at 75% of the device is not a sure fit; None where no residuals ship."""
    factors = table.memory_factors()
    if factors is None or not result.ranked:
        return None
    lo, hi, basis = factors
    usable = hw.usable_memory_bytes
    clear = next((i for i, p in enumerate(result.ranked) if hw.fits(p.peak_mem_bytes * hi, p.layout.devices)), None)
    return {"lo": lo, "hi": hi, "basis": basis, "usable_gib": usable / 2**30, "clear_index": clear}


def _with_memory(pred: dict, check: dict | None) -> dict:
    """A prediction's dict with the 80% interval of its peak memory (`peak_mem_gib_lo`/`_hi`)."""
    if check is None:
        return pred
    return {**pred, "peak_mem_gib_lo": pred["peak_mem_gib"] * check["lo"],
            "peak_mem_gib_hi": pred["peak_mem_gib"] * check["hi"]}


def _with_interval(pred: dict, lo: float, hi: float) -> dict:
    """A prediction's dict with the 80% interval of its step time and throughput (`_lo`/`_hi`)."""
    return {**pred, "step_time_s_lo": pred["step_time_s"] * lo, "step_time_s_hi": pred["step_time_s"] * hi,
            "tokens_per_s_per_device_lo": pred["tokens_per_s_per_device"] / hi,
            "tokens_per_s_per_device_hi": pred["tokens_per_s_per_device"] / lo}


def run(args: argparse.Namespace) -> int:
    import sys

    _check_numbers(args)
    if args.comm_profile and _mode(args) != "probe":  # a plan given a profile it never read (audit 14, L3)
        raise ConfigError(f"--comm-profile {args.comm_profile} is only for `stride plan probe` (which names it in the "
                          "entry it writes); a plan reads measured collectives from a --hardware-file entry's "
                          "`comm_profile = \"FILE\"`")
    for line in unused_options(args):
        print(f"stride plan: note: {line}", file=sys.stderr)
    try:
        return _run(args)
    except ConfigError as exc:
        hinted = _precision_hint(str(exc), workload=_mode(args) == "workload")
        if hinted == str(exc):
            raise
        raise ConfigError(hinted) from None


def _run(args: argparse.Namespace) -> int:
    from stride.perfmodel.hardware import load_catalog

    if args.action not in (None, "calibrate", "probe"):
        raise ConfigError(f"`{args.action}` is not an action of stride plan (calibrate, probe; none: plan); a value "
                          "given without its option? (e.g. --devices 8)")

    if args.action == "calibrate":
        from stride.perfmodel.calibrate import calibrate_cli

        return calibrate_cli(args)
    if args.action == "probe":
        from stride.perfmodel.probe import probe_cli

        return probe_cli(args)
    catalog = load_catalog(args.hardware_file)
    if args.list_hardware or args.list_models:
        from stride.cli.plan_tables import print_hardware, print_models

        if args.list_hardware:
            print_hardware(catalog, args.json)
        if args.list_models:
            print_models(args.json)
        return 0
    eff = _eff(args, catalog)
    if args.from_csv:
        from stride.cli.plan_tables import print_rows
        from stride.perfmodel.predict_rows import predict_csv

        csv = Path(args.from_csv)
        if not csv.exists() and not csv.is_absolute():  # "file not found: data/..." from outside the clone said no more
            raise ConfigError(f"--from-csv: file not found: {csv} (looked for {csv.resolve()}: relative paths are read "
                              "from the current directory)")
        rows = predict_csv(args.from_csv, catalog, eff)
        if args.json:
            print(json.dumps(rows))
        else:
            print_rows(rows)
        # nothing predicted, whether every row was refused or the file holds none: a script must not read either
        # as success (a header alone had exited 0 with "0 rows"); the output above stays the one list of rows
        if not rows:
            print(f"stride plan: {args.from_csv} has a header and no rows: nothing to predict", file=sys.stderr)
            return 1
        if all(r.get("reason") for r in rows):
            print(f"stride plan: no row of {args.from_csv} could be predicted (each row's reason says why)",
                  file=sys.stderr)
            return 1
        return 0
    if args.workload:
        if args.devices is None:
            raise ConfigError("stride plan --workload needs --devices")
        return _plan_workload(args, *_device(catalog, args.hardware, quiet=not args.json), eff)
    from stride.perfmodel.frameworks import get_framework

    if args.framework is not None:
        args.framework = get_framework(args.framework).name
    if not args.model or (args.devices is None and args.compare_hardware in (None, "all")):
        raise ConfigError("stride plan needs --model (or --workload) and --devices or --compare-hardware "
                          "NAME:COUNT,... "
                          "(or --from-csv FILE, --list-hardware, --list-models, or `calibrate RUNS...`)")
    from stride.perfmodel.intervals import load_intervals
    from stride.perfmodel.model_spec import parse_model_spec
    from stride.perfmodel.planner import (
        default_batch_note,
        default_global_batch,
        distinct_alternatives,
        explain,
        price_note,
        search,
    )

    spec = parse_model_spec(args.model)
    if args.seq is not None:
        spec = spec.with_seq(args.seq)
    if args.compare_hardware:
        return _compare(args, spec, catalog, eff)
    gb = args.global_batch if args.global_batch is not None else default_global_batch(spec, args.devices)
    hw, notes = _device(catalog, args.hardware, quiet=not args.json)
    slice_note = next((n for n in notes if n.startswith("TPU slice of ")), None)
    if slice_note and hw.scaleup_domain != args.devices:  # "TPU v5p-128" names 64 chips; --devices decides
        msg = (f"--hardware names a slice of {hw.scaleup_domain} chips but --devices is {args.devices}: planned on "
               f"{args.devices} chips (pass --devices {hw.scaleup_domain} for the whole slice)")
        notes.append(msg)
    if args.framework is None:  # a TPU runs JAX/XLA (MaxText), not Megatron (first-contact audit of 2026-12-06)
        from stride.perfmodel.planner import default_framework

        args.framework = default_framework(hw)
    t0 = time.perf_counter()
    result = search(spec, hw, args.devices, gb, eff, args.precision, args.framework, args.fp8_recipe)
    if args.global_batch is None and (line := default_batch_note(spec, args.devices, gb)):
        result.notes.append(line)
    if result.best is not None and (line := price_note(hw)):  # the $/step column reads 0
        result.notes.append(line)
    if result.best is not None:
        result.notes.extend(_assumed_price(hw))
    seconds = time.perf_counter() - t0
    alts = distinct_alternatives(result)
    table = load_intervals()  # once: the time and the memory intervals
    lo, hi, basis = _interval(table, hw, args, spec.moe)
    check = _memory_check(table, result, hw)
    if args.json:
        best = result.best

        def out(p) -> dict:
            return _with_memory(_with_interval(p.to_dict(), lo, hi), check)

        clear = check and check["clear_index"]
        print(json.dumps({
            "model": spec.name, "hardware": hw.name, "hardware_text": args.hardware, "hardware_notes": notes,
            "devices": args.devices, "global_batch": gb, "seq": spec.seq, "considered": result.considered,
            "fit": len(result.ranked), "search_seconds": seconds, "interval_basis": basis, "notes": result.notes,
            "usable_memory_gib": hw.usable_memory_bytes / 2**30,
            "memory_interval_basis": check["basis"] if check else None,
            # the fastest layout that fits even at the upper end of its memory interval (null: none does)
            "clear_of_memory_error": out(result.ranked[clear]) if clear is not None else None,
            "best": out(best) if best else None,
            "ranked": [out(p) for p in result.ranked[: args.top]],
            "alternatives": [{**out(p), "why_slower": explain(p, best)} for p in alts] if best else [],
            "fastest_not_fitting": [out(p) for p in result.rejected_memory[:3]],
            "closest_not_fitting": [out(p) for p in result.closest_not_fitting()],
            "fits_from_devices": (found := _fits_from(args, spec, hw, gb, eff, result))[0],
            # the batch there: that count's default where this plan's does not divide it
            "fits_from_global_batch": found[1].global_batch if found[1] is not None else None,
            # where nothing fits and no count was found: which counts were tried (none past 16,384)
            "fits_from_note": _no_fit_anywhere(args.devices) if best is None and found[0] is None else None,
        }))
        return 0 if best else 1  # as the table: no layout fits is a failure, whichever the output
    _print_plan(result, alts, spec, hw, args.devices, gb, seconds, args.top, (lo, hi, basis),
                _hardware_lines(args.hardware, notes), check, _fits_from(args, spec, hw, gb, eff, result))
    return 0 if result.best else 1


def _no_fit_anywhere(devices: int) -> str:
    """What the search for a fitting device count tried when it found none: doublings of --devices up to
    FITS_FROM_MOST, or nothing where --devices is past half of it ("no device count up to 16,384 fits it" was
    printed for 20,000 devices, where no count was tried at all; planner audit of 2026-12-07)."""
    from stride.perfmodel.planner import FITS_FROM_MOST

    if devices * 2 > FITS_FROM_MOST:
        return (f"no more devices were tried (the search for a count that fits stops at {FITS_FROM_MOST:,}, and "
                f"{devices:,} is already past half of it): a shorter --seq or a smaller model")
    return (f"no count from {devices * 2:,} to {FITS_FROM_MOST:,} devices (doubling --devices) fits it: a shorter "
            "--seq or a smaller model")


def _fits_from(args, spec, hw, gb: int, eff, result) -> tuple[int | None, object]:
    """Where nothing fits: the fewest devices on which something does (planner.fits_from), else (None, None)."""
    from stride.perfmodel.planner import fits_from

    if result.best is not None:
        return None, None
    found = fits_from(spec, hw, args.devices, gb, eff, args.precision, args.framework, args.fp8_recipe)
    return found if found else (None, None)


def _plan_workload(args, hw, notes: list[str], eff) -> int:
    from stride.perfmodel.planner import explain
    from stride.perfmodel.workload_plan import describe, search_workload, settings

    t0 = time.perf_counter()
    plan = search_workload(args.workload, hw, args.devices, args.global_batch, eff, args.overrides)
    seconds = time.perf_counter() - t0
    res, best = plan.result, plan.result.best
    tr = next(iter(plan.traces.values()))
    assumed = _assumed_collectives(hw, args.devices) + (_assumed_price(hw) if best else [])
    if args.json:
        print(json.dumps({
            "workload": plan.name, "hardware": hw.name, "hardware_text": args.hardware, "hardware_notes": notes,
            "notes": assumed,
            "devices": args.devices, "global_batch": plan.global_batch,
            "considered": res.considered, "fit": len(res.ranked), "search_seconds": seconds,
            "trace": {mb: t.to_dict() for mb, t in plan.traces.items()},
            "best": {**best.to_dict(), "settings": settings(best.layout, plan.global_batch)} if best else None,
            "ranked": [{**p.to_dict(), "settings": settings(p.layout, plan.global_batch)}
                       for p in res.ranked[: args.top]],
            "fastest_not_fitting": [p.to_dict() for p in res.rejected_memory[:3]],
        }))
        return 0 if best else 1
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from stride.shown_text import literal

    con = Console()
    con.print(Text.assemble(
        literal(plan.name, "bold"),
        f" ({tr.param_count:,} parameters, {tr.precision}, traced at micro-batch "
        f"{', '.join(map(str, sorted(plan.traces)))}) on {args.devices} x ", literal(hw.display_name),
        f", global batch {plan.global_batch}: {res.considered} layouts, {len(res.ranked)} fit ({seconds:.2f} s)"))
    for line in _hardware_lines(args.hardware, notes):
        con.print(line, markup=False, highlight=False)
    for line in assumed:
        con.print(f"note: {line}", markup=False, highlight=False)
    lt = Table(title=f"per layer, one micro-batch of {tr.micro_batch}")
    for col in ("layer", "params", "fwd+bwd GFLOP", "MB moved", "kernels", "saved MB"):
        lt.add_column(col, justify="left" if col == "layer" else "right")
    for la in tr.layers:
        lt.add_row(literal(la.name), f"{la.params:,}", f"{la.flops / 1e9:.3f}",
                   f"{(la.fwd.bytes + la.bwd.bytes) / 1e6:.1f}",
                   str(la.fwd.kernels + la.bwd.kernels), f"{la.saved_bytes / 1e6:.2f}")
    con.print(lt)
    if not best:
        con.print("[red]no layout fits in memory[/]")
        return 1
    t = Table(title="fitting layouts, fastest first (within 0.5 %: less memory first)")
    for col in ("#", "layout", "step s", "samples/s/dev", "MFU", "mem GiB"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for i, p in enumerate(res.ranked[: args.top], 1):
        t.add_row(str(i), describe(p.layout), f"{p.step_time_s:.4f}",
                  f"{plan.global_batch / p.step_time_s / args.devices:,.1f}", f"{p.mfu * 100:.1f}%",
                  f"{p.peak_mem_gib:.3f}")
    con.print(t)
    terms = ", ".join(f"{k} {v:.4f}s" for k, v in best.breakdown_s.items() if v > 0)
    con.print(f"best: {describe(best.layout)}: {terms}")
    # a layout of N ranks needs N processes: without --nproc the --set lines alone trained one process (first-contact
    # audit of 2026-12-07: "2 rank(s), ddp" printed no --nproc, and its settings name no parallel key)
    nproc = f"--nproc {best.layout.dp} " if best.layout.dp > 1 else ""
    con.print(f"  run it with: {nproc}{' '.join('--set ' + s for s in settings(best.layout, plan.global_batch))}")
    for p in res.ranked[1:4]:
        con.print(f"  {describe(p.layout)}: {explain(p, best)}")
    return 0



def _usable(hw) -> str:
    """'79.1 usable (80 on the datasheet)': what a plan's peak is held to, and the figure a user knows."""
    usable = hw.usable_memory_bytes / 2**30
    return f"{usable:.1f} usable" + (f" ({hw.memory_gib:g} on the datasheet)" if abs(usable - hw.memory_gib) >= 0.05
                                     else "")


def _memory_lines(result, check: dict | None) -> list[str]:
    """The best layout's memory interval and, where its upper end is over the device, the fastest that is clear."""
    from stride.cli.plan_tables import secs

    if check is None:
        return []
    best = result.best
    lo, hi = best.peak_mem_gib * check["lo"], best.peak_mem_gib * check["hi"]
    head = f"memory, 80% interval: {lo:.1f} - {hi:.1f} GiB ({check['basis']})"
    i = check["clear_index"]
    if i == 0:
        return [f"{head}: fits even at its upper end"]
    if i is None:
        return [f"{head}: over the {check['usable_gib']:.1f} GiB usable at its upper end, and so is every layout "
                "ranked; confirm the peak with a short run before committing to it"]
    p = result.ranked[i]
    return [f"{head}: over the {check['usable_gib']:.1f} GiB usable at its upper end",
            f"  fastest layout that fits even there: #{i + 1} {p.layout.short()}, {secs(p.step_time_s)} s a step "
            f"({(p.step_time_s / best.step_time_s - 1) * 100:+.0f}%), {p.peak_mem_gib:.1f} GiB"]


def _print_plan(result, alts, spec, hw, devices, gb, seconds, top, interval: tuple[float, float, str],
                hardware_lines: list[str] = (), check: dict | None = None,
                fits_from: tuple[int | None, object] = (None, None)) -> None:
    from rich.table import Table
    from rich.text import Text

    from stride.cli.plan_tables import _console, secs
    from stride.perfmodel.planner import explain
    from stride.shown_text import literal

    con = _console()
    con.print(Text.assemble(literal(spec.name, "bold"), f" on {devices} x ", literal(hw.display_name),
                            f", global batch {gb} x {spec.seq} tokens: {result.considered} layouts, "
                            f"{len(result.ranked)} fit ({seconds:.2f} s)"))
    for line in hardware_lines:
        con.print(line, markup=False, highlight=False)
    for line in result.notes:  # what limited the search (the framework's parallelism, the batch's divisors)
        con.print(f"note: {line}", markup=False, highlight=False)
    if not result.best:
        con.print(f"[red]no layout fits in memory[/] on {devices} x {hw.display_name}; the closest need:",
                  highlight=False)
        for p in result.closest_not_fitting():
            con.print(f"  {p.layout.short()}: {p.peak_mem_gib:.1f} GiB of {_usable(hw)}", markup=False,
                      highlight=False)
        n, p = fits_from
        if n is not None:
            # the batch there is said where it is not this plan's: fits_from takes that count's default where this
            # batch does not divide it (seq 1M on 8 H100s: "2419 s a step" at 32 sequences, under a header of 8)
            other = f" at global batch {p.global_batch:,} (that count's default; this plan's is {gb:,})" \
                if p.global_batch != gb else ""
            con.print(f"fits from {n} devices: fastest there {p.layout.short()}, {secs(p.step_time_s)} s a step{other} "
                      f"(`--devices {n}`); or a shorter --seq, a smaller model, fp8", markup=False, highlight=False)
        else:
            con.print(_no_fit_anywhere(devices), markup=False, highlight=False)
        return
    lo, hi, basis = interval
    t = Table(title="fitting layouts, fastest first (within 0.5 %: less memory first; 80% interval from held-out "
                    "residuals of the same kind)")
    prec = result.ranked[0].layout.precision
    # MFU is over the peak of the precision the GEMMs run in: say which where it is not the 16-bit one (an fp8 plan's
    # 31 % read as a regression beside bf16's 47 %; torchtitan and Meta quote fp8 runs over the bf16 peak)
    mfu_col = "MFU" if prec in ("bf16", "fp16") else f"MFU ({prec} peak)"
    for col in ("#", "layout", "step s", "80% interval", "tok/s/dev", "80% interval ", mfu_col, "mem GiB", "$/step"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for i, p in enumerate(result.ranked[:top], 1):
        t.add_row(str(i), p.layout.short(), secs(p.step_time_s),
                  f"{secs(p.step_time_s * lo)} - {secs(p.step_time_s * hi)}", f"{p.tokens_per_s_per_device:,.0f}",
                  f"{p.tokens_per_s_per_device / hi:,.0f} - {p.tokens_per_s_per_device / lo:,.0f}",
                  f"{p.mfu * 100:.1f}%", f"{p.peak_mem_gib:.1f}", secs(p.cost_per_step_usd))
    con.print(t)
    con.print(f"80% interval: {basis}")
    best = result.best
    b = Table(title=f"breakdown of the best: {best.layout.short()}")
    b.add_column("term")
    b.add_column("seconds", justify="right")
    b.add_column("share", justify="right")
    for k, v in sorted(best.breakdown_s.items(), key=lambda kv: -kv[1]):
        if v > 0:
            b.add_row(k, secs(v), f"{v / best.step_time_s * 100:.1f}%")
    con.print(b)
    host = best.breakdown_s.get("host_bound", 0.0) / best.step_time_s
    if host >= 0.3:  # no layout removes launch overhead: the batch or the way kernels are launched does
        con.print(f"[yellow]note:[/] the best step is {host:.0%} host-bound (kernel launches outrun the work): a "
                  "larger --global-batch, or CUDA graphs (torch.compile mode='reduce-overhead'), pays more here "
                  "than any layout")
    mem = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in best.memory_bytes.items())
    con.print(f"memory per device (GiB): {mem}; total {best.peak_mem_gib:.1f} of {_usable(hw)}")
    for line in _memory_lines(result, check):
        con.print(line, markup=False, highlight=False)
    if alts:
        con.print("[bold]why the other shapes lose[/] (best layout of each other tp x pp):")
        for p in alts:
            con.print(f"  {p.layout.short()}: {explain(p, best)}")
    if result.rejected_memory:
        fastest = result.rejected_memory[0]
        if fastest.step_time_s < best.step_time_s:
            con.print(f"  faster but out of memory: {fastest.layout.short()} needs {fastest.peak_mem_gib:.1f} GiB "
                      f"of {_usable(hw)}")


def _compare(args, spec, catalog, eff) -> int:
    from stride.cli.plan_tables import print_compare
    from stride.perfmodel.intervals import load_intervals
    from stride.perfmodel.planner import compare_hardware, default_batch_note, parse_fleet, price_note

    if args.compare_hardware == "all":
        fleet = [(hw, args.devices) for hw in catalog.devices.values() if not hw.cpu]
    else:
        fleet = []
        for name, count in parse_fleet(args.compare_hardware, catalog.names()):
            if count is None and args.devices is None:
                raise ConfigError(f"--compare-hardware: `{name}` has no device count (name:count) "
                                  "and --devices is unset")
            try:
                part = catalog.get(name)
            except ConfigError as exc:
                raise ConfigError(f"--compare-hardware: {exc}; --compare-hardware takes catalog names only (see "
                                  "--list-hardware, or an entry of a --hardware-file); a described part ('H100 SXM "
                                  "96GB @ 500 W') is planned with --hardware TEXT --devices N") from None
            fleet.append((part, count if count is not None else args.devices))
    t0 = time.perf_counter()
    rows = compare_hardware(spec, fleet, args.global_batch, eff, args.tokens, args.precision, args.sort, args.framework,
                            fits_from_hint=args.compare_hardware != "all")
    parts = {hw.name: hw for hw, _ in fleet}
    table = load_intervals()  # once for every part's row
    for r in rows:
        if "reason" in r:
            r["reason"] = _precision_hint(r["reason"])
        else:
            lo, hi, r["interval_basis"] = _interval(table, parts[r["hardware"]], args, spec.moe)
            r["hours_to_budget_lo"], r["hours_to_budget_hi"] = r["hours_to_budget"] * lo, r["hours_to_budget"] * hi
            lines = [line] if args.global_batch is None and (
                line := default_batch_note(spec, r["devices"], r["global_batch"])) else []
            if price := price_note(parts[r["hardware"]], args.sort):  # a $0 part tops --sort cost: say why
                lines.append(price)
            step_tokens = r["global_batch"] * spec.seq
            if args.tokens < step_tokens:  # hours and cost of a fraction of one step (planner audit of 2026-12-07)
                lines.append(f"--tokens {args.tokens:g} is less than one step ({step_tokens:,} tokens): the hours and "
                             "cost are that fraction of a step's")
            if lines:
                r["note"] = "; ".join(lines)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"model": spec.name, "tokens": args.tokens, "sort": args.sort,
                          "framework": args.framework or "each part's own (maxtext on a TPU, else megatron)",
                          "precision": args.precision, "search_seconds": seconds, "hardware": rows}))
    else:
        print_compare(rows, spec.name, args.tokens, args.sort, seconds, args.precision)
    return 0 if any("reason" not in r for r in rows) else 1
