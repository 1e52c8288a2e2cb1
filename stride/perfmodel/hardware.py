"""Hardware catalog: typed device profiles loaded from TOML.

The default catalog is `stride/perfmodel/hardware.toml` (datasheet values; package data). A user file passed with
`--hardware-file` adds devices or overrides fields of existing ones (`base = "name"` inherits),
so measured profiles (a matmul probe, `stride comm`) can replace datasheet numbers without
editing the shipped file.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stride.comm.fit_quality import MIN_R2
from stride.config.errors import ConfigError, suggest
from stride.files.input_file import InputFileError, read_input_text
from stride.files.strict_json import finite_number

# package data beside this file, so a pip-installed stride (and the Docker image, which installs it into
# site-packages) finds it; it was configs/hardware.toml two folders up, which only a clone has
DEFAULT_CATALOG = Path(__file__).with_name("hardware.toml")
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
# Share of the vendor's memory figure a process can allocate where the catalog has no measured `usable_memory_gib`:
# the driver keeps the rest (ECC, page tables, firmware). The total torch reports against the vendor figure:
# V100 31.74/32, A100 39.49/40 and 79.15/80, H100 79.11-79.25/80, H200 139.80/141, B200 178.35/180 (0.987-0.992);
# MI300X 191.98/192. 0.99 is the middle of the NVIDIA parts.
USABLE_MEMORY_FRACTION = 0.99


# NVLink meshes without a switch: for a board of n GPUs, the links between each pair (a symmetric table, 0 = none).
# "hybrid-cube-mesh": V100 (and P100) SXM2 boards. 8 GPUs (HGX-1: DGX-1, AWS p3.16xlarge, Azure NDv2) are joined as
# `nvidia-smi topo -m` prints a DGX-1 (Microway, "nvidia-smi: Control Your GPUs", section "Reviewing System/GPU
# Topology and NVLink"; NV1 / NV2 = one / two bonded links): each GPU's 6 links go 1 or 2 to four peers, none to
# the other three. 4-GPU boards join every pair by 2 links (6 links, 3 peers). A ring over a group runs on the links
# between its members: at most as many links as the worst-joined member has to the others, each link a sixth of the
# GPU's NVLink bandwidth. So a TP-2 pair of a DGX-1 gets one link (25 GB/s), not the 150 GB/s a switch would give.
_DGX1 = ((0, 1, 1, 2, 2, 0, 0, 0), (1, 0, 2, 1, 0, 2, 0, 0), (1, 2, 0, 2, 0, 0, 1, 0), (2, 1, 2, 0, 0, 0, 0, 1),
         (2, 0, 0, 0, 0, 1, 1, 2), (0, 2, 0, 0, 1, 0, 2, 1), (0, 0, 1, 0, 1, 2, 0, 2), (0, 0, 0, 1, 2, 1, 2, 0))
_FULL4 = tuple(tuple(0 if i == j else 2 for j in range(4)) for i in range(4))
MESHES: dict[str, dict[int, tuple[tuple[int, ...], ...]]] = {"hybrid-cube-mesh": {8: _DGX1, 4: _FULL4}}


# where a catalog entry does not give its host link: PCIe Gen4 x16, 32 GB/s per direction; and a host share of 50
# GB/s of memory bandwidth per device (a 2-socket DDR4-3200 server, ~410 GB/s, over 8 GPUs). Assumed.
HOST_LINK_GBPS = 32.0
HOST_MEMORY_GBPS = 50.0


@dataclass(frozen=True)
class Hardware:
    """One accelerator (or CPU socket) and the fabric around it; SI units in fields' names."""

    name: str
    display_name: str
    peak_tflops: dict[str, float]
    memory_gib: float  # the vendor's figure ("80GB"), taken as GiB
    memory_bw_tbps: float
    scaleup_bw_gbps: float
    scaleup_domain: int
    scaleup_latency_us: float
    scaleout_bw_gbps: float
    scaleout_latency_us: float
    price_per_hour_usd: float
    # fraction of the link's line rate NCCL's bus bandwidth reaches (nccl-tests busbw / spec), per level
    scaleup_busbw_fraction: float = 1.0
    scaleout_busbw_fraction: float = 1.0
    # GPUs joined point to point by NVLink links, not through a switch (MESHES above): a group gets the links
    # between its members, not the whole `scaleup_bw_gbps`; "" = a switch, every group the full bandwidth
    scaleup_mesh: str = ""
    aliases: tuple[str, ...] = ()
    vendor: str = ""  # nvidia | amd | google | intel | cpu: groups the GEMM efficiency and the intervals
    generation: str = ""  # hopper, ampere, tpu-v5p, ...: groups the error intervals
    memory_type: str = ""
    tdp_w: float = 0.0  # board power the peaks are quoted at (0: not stated); a lower cap lowers the clock
    # Maximum Achievable Matmul TFLOP/s per dtype (the best large GEMM a part sustains at its power limit,
    # e.g. stas00/ml-engineering's MAMF table); `matmul_fraction` turns it into a fraction of the peak
    mamf_tflops: dict[str, float] = field(default_factory=dict)
    matmul_efficiency: float | None = None  # measured fraction of peak for large GEMMs (bf16 MAMF / peak)
    attention_efficiency: float | None = None  # published/measured fraction of peak for fused attention
    runtime_overhead_gib: float = 1.0  # context, allocator reserve, workspaces
    # what one process can have: the total the runtime reports (torch.cuda.mem_get_info()[1], the "total capacity"
    # of an OOM message), below the vendor figure; None: memory_gib x USABLE_MEMORY_FRACTION (a CPU host: all of it)
    usable_memory_gib: float | None = None
    # host time per eager kernel (Python, dispatcher, launch): traced workloads pay it per kernel;
    # on a CPU (`cpu = true`) the host also runs the kernel, so it adds; on an accelerator it hides
    # under the kernel unless the kernel is shorter
    kernel_overhead_us: float = 10.0
    # what host (CPU) offloading pays: the device's link to host memory, GB/s per direction (PCIe Gen3 x16 16, Gen4
    # 32, Gen5 64; NVLink-C2C on Grace parts), and the host memory bandwidth one device's share of the host has for
    # an optimizer step run there. 0: not in the entry, PCIe Gen4 x16 (32) and 50 GB/s assumed (HOST_* defaults)
    host_link_gbps: float = 0.0
    host_memory_gbps: float = 0.0
    fsdp_unit_overhead_us: float = 0.0  # FSDP2 host work per unit per step (hooks, DTensor), measured
    # per-rank compute time with every core of a host running a rank, over one rank alone (CPU
    # hosts: shared memory system and caches); measured by `stride plan probe`
    contention_slowdown: float = 1.0
    cpu: bool = False
    # threads per process the entry's figures were measured at (`stride plan probe`); 0: not measured here
    probed_threads: int = 0
    # the probed host's CPU (env.json's cpu_model, os.cpu_count()): calibrate names runs from another machine;
    # "" / 0: a probe file written before it recorded them
    probed_cpu_model: str = ""
    probed_cpu_count: int = 0
    # measured collectives (`stride comm --profile-out`, file named by `comm_profile`):
    # name -> (alpha seconds, seconds per byte, world size it was measured at)
    collectives: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    assumed: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict)  # per-field source where it differs from `source`
    notes: str = ""

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; a clear error where the device has none."""
        if dtype not in self.peak_tflops:
            have = ", ".join(sorted(self.peak_tflops))
            raise ConfigError(f"hardware `{self.name}` has no {dtype} peak (it lists: {have})")
        return self.peak_tflops[dtype] * 1e12

    def fits(self, per_rank_bytes: float, ranks: int) -> bool:
        """Whether `ranks` ranks of `per_rank_bytes` each fit: each accelerator has its own memory; the ranks of
        a CPU host (up to `scaleup_domain` of them) share the host's."""
        sharing = max(1, min(ranks, self.scaleup_domain)) if self.cpu else 1
        return per_rank_bytes * sharing <= self.usable_memory_bytes

    @property
    def host_link_bytes_per_s(self) -> float:
        """Bytes a second one device moves to or from host memory at the line rate (HOST_LINK_GBPS where unknown)."""
        return (self.host_link_gbps or HOST_LINK_GBPS) * 1e9

    @property
    def host_memory_bytes_per_s(self) -> float:
        """Host memory bandwidth one device's share of its host has (HOST_MEMORY_GBPS where unknown)."""
        return (self.host_memory_gbps or HOST_MEMORY_GBPS) * 1e9

    def matmul_fraction(self, dtype: str) -> float | None:
        """Fraction of the `dtype` peak the best large GEMM reaches: the MAMF figure where the catalog has
        one for that dtype, else `matmul_efficiency` (the bf16 one, assumed for other dtypes), else None."""
        mamf, peak = self.mamf_tflops.get(dtype), self.peak_tflops.get(dtype)
        if mamf and peak:
            return min(1.0, mamf / peak)
        return self.matmul_efficiency

    def collective_fit(self, name: str, n: int) -> tuple[float, float] | None:
        """Measured (alpha seconds, seconds per byte) of `name` on a group of `n`, if profiled at that size. An
        all-reduce the profile lacks (`stride comm` leaves out a fit it cannot resolve: timings too noisy on a loaded
        host) is its two halves, a reduce-scatter and an all-gather of the same bytes (a ring all-reduce moves
        exactly those), where both were measured at `n`: one start-up (gloo runs it as one collective: the larger
        of theirs) and both halves' bytes; 4.2 ms for 4 MB on 2 gloo ranks against 2.8 ms measured, where the two
        collectives' plain sum said 5.2 ms. Before, it fell to the link model, whose links a CPU entry only assumes
        (a 2-rank gloo all-reduce of 3 MB was priced at 0.01 ms against about 2.5 ms measured)."""
        if n <= 1:
            return None
        fit = self.collectives.get(name)
        if fit is None and name == "all_reduce":
            halves = [self.collectives.get(h) for h in ("reduce_scatter", "all_gather")]
            if any(h is None or h[2] != n for h in halves):
                return None
            return max(h[0] for h in halves), sum(h[1] for h in halves)  # type: ignore[index]
        return (fit[0], fit[1]) if fit is not None and fit[2] == n else None

    def collective_time(self, name: str, nbytes: float, n: int) -> float | None:
        """Measured alpha + beta * bytes for `name` on a group of `n` (`collective_fit`), if profiled there."""
        fit = self.collective_fit(name, n)
        return None if fit is None else fit[0] + fit[1] * nbytes

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def usable_memory_bytes(self) -> float:
        """Bytes a process can allocate, its runtime's context included: what `fits` compares a plan's peak to."""
        if self.usable_memory_gib is not None:
            return self.usable_memory_gib * 2**30
        return self.memory_bytes * (1.0 if self.cpu else USABLE_MEMORY_FRACTION)

    @property
    def memory_bw(self) -> float:
        return self.memory_bw_tbps * 1e12


_REQUIRED = ("peak_tflops", "memory_gib", "memory_bw_tbps", "scaleup_bw_gbps", "scaleup_domain",
             "scaleup_latency_us", "scaleout_bw_gbps", "scaleout_latency_us", "price_per_hour_usd")
_FIELDS = {f.name: f for f in dataclasses.fields(Hardware)} | {"comm_profile": None}
# ceilings 100-1000x past today's parts: a value above is a typo or a unit slip, refused naming the field
_PLAUSIBLE_MAX = {"memory_gib": 1e5, "usable_memory_gib": 1e5, "memory_bw_tbps": 1e3, "scaleup_bw_gbps": 1e5,
                  "scaleout_bw_gbps": 1e5, "host_link_gbps": 1e5, "host_memory_gbps": 1e5, "scaleup_latency_us": 1e6,
                  "scaleout_latency_us": 1e6, "price_per_hour_usd": 1e5, "tdp_w": 1e5, "kernel_overhead_us": 1e6,
                  "fsdp_unit_overhead_us": 1e6, "runtime_overhead_gib": 1e4, "contention_slowdown": 1e3}


_MAX_FILE_BYTES = 16 << 20  # a hardware catalog or comm profile is KiBs


def _load_toml(path: Path, what: str) -> dict[str, Any]:
    """A TOML file's tables, or a ConfigError saying which file (`what`) is missing or malformed."""
    try:
        return tomllib.loads(read_input_text(path, limit=_MAX_FILE_BYTES, what=f"{what} file"))
    except InputFileError as exc:  # missing, a FIFO or /dev/zero (never read), too large, not UTF-8
        raise ConfigError(str(exc)) from None
    except ValueError as exc:  # TOMLDecodeError, and an integer over 4300 digits (a plain ValueError: a traceback)
        raise ConfigError(f"{what} file {path} is not valid TOML: {exc}") from None
    except RecursionError:  # arrays or tables nested thousands deep: a traceback from tomllib (audit 14, L4)
        raise ConfigError(f"{what} file {path} is not valid TOML: nested too deeply to read") from None


def read_comm_profile(path: Path, where: str) -> dict[str, tuple[float, float, int]]:
    """Per-collective alpha-beta fits from a `stride comm --profile-out` TOML (stride-hwprofile-1)."""
    data = _load_toml(path, f"{where}: comm_profile")
    meta = data.get("meta", {})
    if not isinstance(meta, dict):  # every key named, each value of its type: `meta = 5` was an AttributeError
        raise ConfigError(f"{where}: {path}: meta = {meta!r:.40} is not a table (format, world_size, ...): not a "
                          "`stride comm` profile")
    if meta.get("format") != "stride-hwprofile-1":
        raise ConfigError(f"{where}: {path} is not a `stride comm` profile (meta.format = {meta.get('format')!r})")
    world = meta.get("world_size", 0)  # 0: not recorded, so no group size matches it
    if "world_size" in meta and (type(world) is not int or world < 1):
        raise ConfigError(f"{where}: {path}: meta.world_size = {world!r:.40} is not a process count (an integer >= 1)")
    collectives = data.get("collectives", {})
    if not isinstance(collectives, dict):
        raise ConfigError(f"{where}: {path}: collectives = {collectives!r:.40} is not a table of [collectives.<name>] "
                          "fits")
    out = {}
    for name, fit in collectives.items():
        if not isinstance(fit, dict):
            raise ConfigError(f"{where}: {path}: collectives.{name} = {fit!r:.40} is not a table (alpha_us, "
                              "beta_us_per_byte)")
        for key in ("alpha_us", "beta_us_per_byte"):
            v = fit.get(key)
            if v is None:
                raise ConfigError(f"{where}: {path} [collectives.{name}] lacks {key}")
            if not finite_number(v):  # NaN passed `< 0`
                raise ConfigError(f"{where}: {path}: collectives.{name}.{key} = {v!r:.40} is not a finite number")
        alpha, beta = float(fit["alpha_us"]) * 1e-6, float(fit["beta_us_per_byte"]) * 1e-6
        if alpha < 0 or beta <= 0:
            raise ConfigError(f"{where}: {path} [collectives.{name}]: alpha must be >= 0 and beta > 0 "
                              f"(got {alpha * 1e6} us, {beta * 1e6} us/B)")
        r2 = fit.get("fit_r2")
        if r2 is not None and (not isinstance(r2, int | float) or isinstance(r2, bool)):
            raise ConfigError(f"{where}: {path}: collectives.{name}.fit_r2 = {r2!r:.40} is not a number")
        if r2 is not None and not r2 >= MIN_R2:  # noise, NaN too (a profile written before `stride comm` left
            continue  # such fits out): that collective falls back to the catalog's link model
        out[name] = (alpha, beta, world)
    if not out:
        raise ConfigError(f"{where}: {path} has no [collectives.*] fits (none, or none whose fit_r2 reaches "
                          f"{MIN_R2}: their timings were noise)")
    return out


def _check_entry(name: str, entry: dict[str, Any], where: str) -> Hardware:
    unknown = [k for k in entry if k not in _FIELDS and k != "base"]
    if unknown:
        k = unknown[0]
        raise ConfigError(f"{where}: hardware `{name}` has unknown key `{k}`{suggest(k, list(_FIELDS))}")
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise ConfigError(f"{where}: hardware `{name}` is missing {', '.join(missing)}")
    peaks = entry["peak_tflops"]
    if not isinstance(peaks, dict) or not peaks:
        raise ConfigError(f"{where}: hardware `{name}`.peak_tflops must be a table like {{ bf16 = 989 }}")
    for dt, v in peaks.items():
        if dt not in DTYPES:
            raise ConfigError(f"{where}: hardware `{name}`.peak_tflops has unknown dtype `{dt}`"
                              f"{suggest(dt, list(DTYPES))}")
        if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v <= 1e6:  # NaN and 1e300 fail too
            raise ConfigError(f"{where}: hardware `{name}`.peak_tflops.{dt} must be a positive number of TFLOP/s "
                              f"up to 1e6, got {v!r}")
    values: dict[str, Any] = {"name": name, "display_name": entry.get("display_name", name)}
    for key in _FIELDS:
        if key in ("name", "display_name") or key not in entry:
            continue
        v = entry[key]
        if key == "peak_tflops":
            values[key] = {k: float(x) for k, x in v.items()}
        elif key == "mamf_tflops":
            if not isinstance(v, dict) or any(k not in peaks or not isinstance(x, int | float) or isinstance(x, bool)
                                              or not 0 < x <= peaks[k] for k, x in v.items()):
                raise ConfigError(f"{where}: hardware `{name}`.mamf_tflops must be a table like {{ bf16 = 794.5 }} "
                                  "with dtypes of peak_tflops and values in (0, peak]")
            values[key] = {k: float(x) for k, x in v.items()}
        elif key in ("aliases", "assumed"):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ConfigError(f"{where}: hardware `{name}`.{key} must be a list of strings")
            values[key] = tuple(v)
        elif key == "scaleup_mesh":
            if v not in MESHES and v != "":  # "" takes a base's mesh away (a PCIe or switched box)
                raise ConfigError(f"{where}: hardware `{name}`.scaleup_mesh `{v}` is not one of "
                                  f"{', '.join(repr(m) for m in MESHES)} or \"\" (a switch)"
                                  f"{suggest(str(v), list(MESHES))}")
            values[key] = v
        elif key in ("source", "notes", "vendor", "generation", "memory_type", "probed_cpu_model"):
            values[key] = str(v)
        elif key == "sources":
            if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
                raise ConfigError(f"{where}: hardware `{name}`.sources must be a table of strings")
            values[key] = dict(v)
        elif key == "cpu":
            if not isinstance(v, bool):
                raise ConfigError(f"{where}: hardware `{name}`.cpu must be true or false, got {v!r}")
            values[key] = v
        elif key == "comm_profile":
            values["collectives"] = read_comm_profile(Path(where).parent / str(v), f"{where}: hardware `{name}`")
        elif key == "collectives":
            raise ConfigError(f"{where}: hardware `{name}`: give measured collectives as "
                              "comm_profile = \"<stride comm --profile-out file>\"")
        elif key in ("scaleup_domain", "probed_threads", "probed_cpu_count"):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{where}: hardware `{name}`.{key} must be an integer >= 1, got {v!r}")
            values[key] = v
        else:
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < math.inf:  # NaN fails too
                raise ConfigError(f"{where}: hardware `{name}`.{key} must be a number >= 0, got {v!r}")
            if key in ("matmul_efficiency", "attention_efficiency", "scaleup_busbw_fraction",
                       "scaleout_busbw_fraction") and not 0 < v <= 1:
                raise ConfigError(f"{where}: hardware `{name}`.{key} must be in (0, 1], got {v!r}")
            if key == "contention_slowdown" and v < 1:  # 0 made a 2-rank CPU plan's compute free (0.5 ms, not 44)
                raise ConfigError(f"{where}: hardware `{name}`.contention_slowdown = {v:g} is below 1: it multiplies "
                                  "each rank's compute time where ranks share a CPU host (1: they do not slow each "
                                  "other; `stride plan probe` measures it, never below 1)")
            most = _PLAUSIBLE_MAX.get(key)
            if most is not None and v > most:  # 1e300 GiB printed `Infinity` into --json (audit 22, F7)
                raise ConfigError(f"{where}: hardware `{name}`.{key} = {v:g} is past any device ({most:g} at most)")
            values[key] = float(v)
    if "matmul_efficiency" not in values and "bf16" in values.get("mamf_tflops", {}):
        values["matmul_efficiency"] = values["mamf_tflops"]["bf16"] / values["peak_tflops"]["bf16"]
    for key in ("memory_gib", "memory_bw_tbps", "scaleup_bw_gbps", "scaleout_bw_gbps"):
        if values[key] <= 0:
            raise ConfigError(f"{where}: hardware `{name}`.{key} must be > 0")
    usable = values.get("usable_memory_gib")
    if usable is not None and not 0 < usable <= values["memory_gib"]:
        raise ConfigError(f"{where}: hardware `{name}`.usable_memory_gib must be in (0, memory_gib = "
                          f"{values['memory_gib']:g}], got {usable:g}")
    return Hardware(**values)


# what `stride plan probe` measures and writes into its entry (probe.hardware_toml); memory_gib unless it lists it as
# assumed. A probe entry (one with `probed_threads`) lacking one took its base part's datasheet figure without a word
# (a 96-core EPYC's 0.46 TB/s on a 1-thread Intel Xeon)
PROBE_MEASURED = ("peak_tflops.fp64", "peak_tflops.fp32", "peak_tflops.bf16", "memory_gib", "memory_bw_tbps",
                  "kernel_overhead_us", "fsdp_unit_overhead_us", "contention_slowdown")


def _probe_entry_gaps(entry: dict[str, Any]) -> list[str]:
    """The fields `stride plan probe` measures that a probe-written `entry` (it has `probed_threads`) lacks."""
    if "probed_threads" not in entry:
        return []
    peaks = entry.get("peak_tflops")
    assumed = entry.get("assumed") if isinstance(entry.get("assumed"), list) else []
    gaps = []
    for f in PROBE_MEASURED:
        dtype = f.partition(".")[2]
        if dtype:
            if not isinstance(peaks, dict) or dtype not in peaks:
                gaps.append(f)
        elif f not in entry and f not in assumed:
            gaps.append(f)
    return gaps


def _read_table(path: Path) -> dict[str, dict[str, Any]]:
    data = _load_toml(path, "hardware")
    table = data.get("hardware")
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{path}: expected one or more [hardware.<name>] tables")
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: [hardware.{name}] must be a table")
    return table


@dataclass
class Catalog:
    """Devices by name, with alias lookup that tolerates case, punctuation and '(assumed)' notes."""

    devices: dict[str, Hardware] = field(default_factory=dict)

    def names(self) -> list[str]:
        return list(self.devices)

    def suggest(self, name: str) -> str:
        """' (did you mean ...?)' for an unknown name: every entry of a family the name begins ("tpu": all TPUs, not
        the nearest spelling alone), else the closest name."""
        key = _norm(name)
        family = [n for n in self.names() if len(key) >= 2 and _norm(n).startswith(key)]
        if len(family) > 1:
            return f" (did you mean one of {', '.join(f'`{n}`' for n in family)}?)"
        return suggest(name, self.names())

    def get(self, name: str) -> Hardware:
        key = _norm(name)
        for hw in self.devices.values():
            if key == _norm(hw.name) or key in (_norm(a) for a in hw.aliases):
                return hw
        raise ConfigError(f"unknown hardware `{name}`{self.suggest(name)}; "
                          f"known: {', '.join(self.names())}")


def _norm(name: str) -> str:
    name = re.sub(r"\(.*?\)", "", name)  # "H100-SXM5-80GB (assumed)" -> "H100-SXM5-80GB"
    return re.sub(r"[^a-z0-9]", "", name.lower())


def load_catalog(extra: str | Path | None = None, default: Path = DEFAULT_CATALOG) -> Catalog:
    """Default catalog, then `extra` on top: new devices are added; `base = "x"` inherits x's fields;
    an entry with an existing name replaces only the fields it names."""
    raw = {k: dict(v) for k, v in _read_table(default).items()}
    where = {k: str(default) for k in raw}
    if extra is not None:
        for name, entry in _read_table(Path(extra)).items():
            if gaps := _probe_entry_gaps(entry):
                raise ConfigError(f"{extra}: [hardware.{name}] lacks {', '.join(gaps)} (measured by `stride plan "
                                  "probe`): its base part's datasheet figure would stand in for this machine's; "
                                  "probe again, or give the measured value")
            base_name = entry.get("base", name if name in raw else None)
            if base_name is not None:
                if base_name not in raw:
                    raise ConfigError(f"{extra}: [hardware.{name}] base `{base_name}` is not in the catalog"
                                      f"{suggest(str(base_name), list(raw))}")
                merged = {k: v for k, v in raw[base_name].items() if k != "aliases" or name == base_name}
                if "matmul_efficiency" in entry and "mamf_tflops" not in entry:
                    merged.pop("mamf_tflops", None)  # the user's measured fraction replaces the published MAMF
                if "memory_gib" in entry and "usable_memory_gib" not in entry:
                    merged.pop("usable_memory_gib", None)  # the base's usable figure was of its own memory
                if name != base_name:
                    merged["display_name"] = entry.get("display_name", name)
                merged.update({k: v for k, v in entry.items() if k != "base"})
                if isinstance(entry.get("peak_tflops"), dict):
                    merged["peak_tflops"] = {**raw[base_name]["peak_tflops"], **entry["peak_tflops"]}
                raw[name] = merged
            else:
                raw[name] = dict(entry)
            where[name] = str(extra)
    return Catalog({name: _check_entry(name, entry, where[name]) for name, entry in raw.items()})
