"""A parallel layout: how one training step is split over devices, and how it is run."""

from __future__ import annotations

from dataclasses import dataclass

from stride.config.errors import ConfigError
from stride.perfmodel.flops import RECOMPUTE_MODES
from stride.perfmodel.model_spec import TransformerSpec

SCHEDULES = ("none", "gpipe", "1f1b", "interleaved")
PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
ATTENTION = ("flash", "materialized")


@dataclass(frozen=True)
class Layout:
    """dp x tp x pp x cp devices. `zero` is the ZeRO stage over the dp group (3 = FSDP)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero: int = 0
    sp: bool = False
    schedule: str = "none"
    vpp: int = 1  # virtual stages per device (interleaved schedule)
    micro_batch: int = 1
    recompute: str = "none"
    precision: str = "bf16"
    attention: str = "flash"
    dp_overlap: bool = True  # overlap gradient reduction with backward
    tp_overlap: bool = False  # overlap TP collectives with GEMMs (e.g. Transformer Engine userbuffers)
    algo: str = "ring"  # all-reduce algorithm: ring | tree | auto

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def short(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}{'+sp' if self.sp else ''}", f"pp{self.pp}"]
        if self.pp > 1:
            parts.append(self.schedule + (f"v{self.vpp}" if self.schedule == "interleaved" else ""))
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        parts += [f"zero{self.zero}", f"mb{self.micro_batch}", f"rc-{self.recompute}", self.precision]
        return " ".join(parts)


def check_layout(layout: Layout, spec: TransformerSpec, global_batch: int) -> int:
    """Raise ConfigError naming the first inconsistency; return the micro-batch count per step."""
    lay = layout
    for name in ("dp", "tp", "pp", "cp", "vpp", "micro_batch"):
        v = getattr(lay, name)
        if not isinstance(v, int) or v < 1:
            raise ConfigError(f"layout: `{name}` must be an integer >= 1, got {v!r}")
    if lay.zero not in (0, 1, 2, 3):
        raise ConfigError(f"layout: `zero` must be 0, 1, 2 or 3, got {lay.zero!r}")
    if lay.schedule not in SCHEDULES:
        raise ConfigError(f"layout: schedule must be one of {SCHEDULES}, got {lay.schedule!r}")
    if lay.recompute not in RECOMPUTE_MODES:
        raise ConfigError(f"layout: recompute must be one of {RECOMPUTE_MODES}, got {lay.recompute!r}")
    if lay.precision not in PRECISIONS:
        raise ConfigError(f"layout: precision must be one of {PRECISIONS}, got {lay.precision!r}")
    if lay.attention not in ATTENTION:
        raise ConfigError(f"layout: attention must be one of {ATTENTION}, got {lay.attention!r}")
    if lay.algo not in ("ring", "tree", "auto"):
        raise ConfigError(f"layout: algo must be ring, tree or auto, got {lay.algo!r}")
    if lay.pp > 1 and lay.schedule == "none":
        raise ConfigError("layout: pp > 1 needs a schedule (gpipe, 1f1b or interleaved)")
    if lay.schedule == "interleaved" and lay.vpp < 2:
        raise ConfigError("layout: the interleaved schedule needs vpp >= 2")
    if lay.schedule != "interleaved" and lay.vpp != 1:
        raise ConfigError(f"layout: vpp={lay.vpp} needs the interleaved schedule")
    if spec.heads % lay.tp or spec.kv_heads % lay.tp and lay.tp % spec.kv_heads:
        raise ConfigError(f"layout: tp={lay.tp} does not divide heads={spec.heads} / kv_heads={spec.kv_heads}")
    if spec.layers % (lay.pp * lay.vpp):
        raise ConfigError(f"layout: layers={spec.layers} is not divisible by pp*vpp={lay.pp * lay.vpp}")
    if spec.seq % lay.cp:
        raise ConfigError(f"layout: seq={spec.seq} is not divisible by cp={lay.cp}")
    if lay.sp and lay.tp == 1:
        raise ConfigError("layout: sequence parallel needs tp > 1")
    per_dp = global_batch / lay.dp
    if global_batch % lay.dp or per_dp % lay.micro_batch:
        raise ConfigError(f"layout: global batch {global_batch} is not divisible by dp*micro_batch="
                          f"{lay.dp}*{lay.micro_batch}")
    m = int(per_dp // lay.micro_batch)
    if lay.schedule == "interleaved" and m % lay.pp:
        raise ConfigError(f"layout: interleaved schedule needs micro-batches ({m}) divisible by pp={lay.pp}")
    return m
