"""Search the layout space for one model on N devices, rank what fits, and say why the rest lose.

The space: tp up to the scale-up domain (a power of two dividing heads), pp dividing layers,
dp the rest; 1f1b or interleaved (v=2) pipelines; micro-batches from 1 up to the whole per-replica
batch (one per power of two: `micro_batches`); ZeRO 0-3; recompute none/selective/full. Sequence
parallel is always on with tp > 1: in this model it moves the same bytes as plain TP and shards
norms and dropout, so it is never worse. Which of tp / pp / ZeRO a layout may use depends on the
framework (`PARALLELISM`): DDP is data parallel only, so the planner never recommends TP or PP to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from stride.config.errors import ConfigError, first_few
from stride.perfmodel.costmodel import Prediction, predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.frameworks import FRAMEWORKS
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.layout import LOOPED, Layout, stage_split
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.precision import check_recipe_on


@dataclass
class PlanResult:
    ranked: list[Prediction]  # fits, fastest first
    rejected_memory: list[Prediction] = field(default_factory=list)  # fastest first
    considered: int = 0
    notes: list[str] = field(default_factory=list)  # what limited the search (framework, batch divisors)

    @property
    def best(self) -> Prediction | None:
        return self.ranked[0] if self.ranked else None

    def closest_not_fitting(self, n: int = 3) -> list[Prediction]:
        """The layouts that miss by the least memory (what to start from when nothing fits; the fastest ones that
        do not fit are the largest micro-batches, the furthest from fitting)."""
        return sorted(self.rejected_memory, key=lambda p: p.peak_mem_bytes)[:n]


def smooth(x: float) -> int:
    """The number of the form 2^k or 3 x 2^k nearest `x` in ratio (at least 1): every such number has the small
    divisors 1, 2, 4, ... (and 3), so a batch made of it splits into many micro-batch sizes."""
    if x <= 1:
        return 1
    top = math.ceil(math.log2(x)) + 1
    cands = [c for k in range(top + 1) for c in (2**k, 3 * 2**k)]
    return min(cands, key=lambda c: (abs(math.log(c / x)), c))


DEFAULT_BATCH_TOKENS = 4e6  # the tokens a step the default global batch aims at


def default_global_batch(spec: TransformerSpec, devices: int, target_tokens: float = DEFAULT_BATCH_TOKENS) -> int:
    """About `target_tokens` per step: `devices` x m sequences, m the per-device share rounded to a power of two or
    three times one (`smooth`; within -18 % / +22 % of the target from two sequences a device). Every dp the
    search tries divides `devices` (dp = devices / (tp x pp)), so each replica takes (tp x pp) x m sequences, a
    multiple of m: micro-batches 1, 2, 4, ... divide it whatever the layout. The nearest plain multiple of
    `devices` (before) could leave a replica a prime count: 4 devices at seq 1024 took 3908 = 4 x 977, micro-batch
    1 or 977 only, a 17 % slower best plan that ranked 4 H100s dearer than 8 (audit 4)."""
    return devices * smooth(target_tokens / spec.seq / devices)


def default_batch_note(spec: TransformerSpec, devices: int, global_batch: int) -> str | None:
    """A line where the default global batch is far past its target: with more devices than DEFAULT_BATCH_TOKENS
    fill at one sequence each, every device still takes one (llama3-8b on 100,000 H100s planned 819M tokens a step
    under a help text that says "about 4M tokens", and said nothing; planner audit of 2026-12-07). None otherwise."""
    tokens = global_batch * spec.seq
    if tokens <= 4 * DEFAULT_BATCH_TOKENS:  # up to 16M tokens: the batches of published large runs (Llama 3 405B)
        return None
    return (f"the default global batch is {global_batch:,} sequences ({global_batch // devices:,} a device), "
            f"{tokens:,.0f} tokens a step: {tokens / DEFAULT_BATCH_TOKENS:,.0f}x the {DEFAULT_BATCH_TOKENS:,.0f} it "
            "aims at, as no device takes less than one sequence; a batch that large may train worse per token. "
            "Pass --global-batch N for a smaller one (fewer replicas, more tensor / pipeline parallelism)")


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


# Context parallelism is tried only where each rank keeps at least this many tokens of a sequence: below it the
# ring's K/V transfers outgrow the attention steps they hide under, and no published layout splits shorter
# sequences (MLPerf's Llama 3.1 8B: cp2 at 8,192 tokens; NeMo's long-context table: cp up to 32 at 1M tokens).
MIN_CP_TOKENS = 4096
MAX_CP = 32


def context_degrees(seq: int, devices: int, runs_cp: bool) -> list[int]:
    """The cp degrees to try: 1, and where the framework runs it, each power of two that divides the devices and
    leaves every rank MIN_CP_TOKENS or more of a sequence split in 2 x cp chunks (the load-balanced causal split of
    Megatron-Core and torchtitan needs seq % (2 * cp) == 0)."""
    out = [1]
    c = 2
    while runs_cp and c <= MAX_CP and devices % c == 0 and seq % (2 * c) == 0 and seq // c >= MIN_CP_TOKENS:
        out.append(c)
        c *= 2
    return out


def micro_batches(per_dp: int) -> list[int]:
    """The micro-batch sizes to try for `per_dp` sequences a data-parallel replica takes a step: for each power of
    two up to `per_dp`, the largest divisor of `per_dp` not above it (so 1, 2, 4, ... where they divide, and the
    whole batch). Capping them at 8 (before) made a small model's plan thousands of micro-steps of kernel
    launches: 12 s a step, 99.5 % host-bound, for a model the traced path runs in 11 ms."""
    divs = _divisors(per_dp)
    out, cap = [], 1
    while cap < 2 * per_dp:
        out.append(max(d for d in divs if d <= cap))
        cap *= 2
    return sorted(set(out))


@dataclass(frozen=True)
class Parallelism:
    """What a framework runs besides plain data parallelism (frameworks.py documents each profile)."""
    tp: bool  # tensor parallel (+ sequence parallel)
    pp: bool  # pipeline parallel
    cp: bool  # context parallel (ring attention; candidate_layouts tries it for long sequences: context_degrees)
    zero: tuple[int, ...]  # ZeRO stages over dp > 1 (3 = FSDP / fully sharded)
    zero_with_pp: tuple[int, ...] | None = None  # the stages allowed with pp > 1, where fewer (None: `zero`)


# The one place that says which layouts a framework can run; candidate_layouts never offers another.
# - megatron: Megatron-Core / NeMo run tp+sp, pp (1F1B, interleaved), cp; the distributed optimizer is ZeRO-1.
# - megatron-legacy: Megatron-LM 2021-22 ran PTD-P (tp, pp, dp; Narayanan et al. 2021), no cp, no distributed
#   optimizer.
# - deepspeed: ZeRO 0-3 over dp; pp through its PipelineEngine, which asserts ZeRO < 2 ("ZeRO-2 and ZeRO-3 are
#   incompatible with pipeline parallelism", deepspeed/runtime/pipe/engine.py); tp through Megatron-DeepSpeed.
# - ddp: torch.nn.parallel.DistributedDataParallel replicates the whole model: data parallel only, ZeRO 0.
# - fsdp1: Composer / llm-foundry / accelerate wrap the model in FSDP1 (FULL_SHARD or SHARD_GRAD_OP): data
#   parallel with ZeRO-3 / ZeRO-2 sharding, no tp or pp.
# - fsdp2: torchtitan runs FSDP2 (dp_shard) with tp+sp, pp and cp.
# - torchtune: one device (the profile's pure-bf16 recipe), or its distributed recipes' FSDP2 (fully_shard,
#   reshard after forward: ZeRO-3); no DDP, no tp or pp in the profile.
# - maxtext: FSDP (ZeRO-3) and data parallel, tp (frameworks.py: MaxText/configs/v5p/*.sh); its pipeline is a
#   circular schedule the 1F1B / interleaved model here does not describe, so pp is not offered.
# A framework missing here (a calibration's own name) may run anything.
PARALLELISM: dict[str, Parallelism] = {
    "megatron": Parallelism(tp=True, pp=True, cp=True, zero=(0, 1)),
    "megatron-legacy": Parallelism(tp=True, pp=True, cp=False, zero=(0,)),
    "deepspeed": Parallelism(tp=True, pp=True, cp=False, zero=(0, 1, 2, 3), zero_with_pp=(0, 1)),
    "ddp": Parallelism(tp=False, pp=False, cp=False, zero=(0,)),
    "fsdp1": Parallelism(tp=False, pp=False, cp=False, zero=(2, 3)),
    "fsdp2": Parallelism(tp=True, pp=True, cp=True, zero=(2, 3)),
    "torchtune": Parallelism(tp=False, pp=False, cp=False, zero=(3,)),
    "maxtext": Parallelism(tp=True, pp=False, cp=False, zero=(3,)),
}
# torch.distributed.pipelining's ScheduleZBVZeroBubble (V-ZB) and ScheduleInterleavedZeroBubble, which torchtitan
# and stride's own trainer run (`zbv`, `zero_bubble`)
ZBV_FRAMEWORKS = ("fsdp2",)
_ANY = Parallelism(tp=True, pp=True, cp=True, zero=(0, 1, 2, 3))


def parallelism(framework: str) -> Parallelism:
    return PARALLELISM.get(framework, _ANY)


def candidate_layouts(spec: TransformerSpec, hw: Hardware, devices: int, global_batch: int,
                      precision: str = "bf16", max_pp: int = 64, attention: str = "flash",
                      framework: str = "megatron", fp8_recipe: str = "delayed") -> list[Layout]:
    out = []
    runs = parallelism(framework)
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= hw.scaleup_domain and spec.heads % t == 0
           and devices % t == 0 and (t == 1 or runs.tp)]
    for tp, cp in ((t, c) for t in tps for c in context_degrees(spec.seq, devices // t, runs.cp)):
        for pp in _divisors(devices // (tp * cp)):
            if pp > max_pp or pp > spec.layers or (pp > 1 and not runs.pp):
                continue
            zeros = runs.zero_with_pp if pp > 1 and runs.zero_with_pp is not None else runs.zero
            dp = devices // (tp * pp * cp)
            if global_batch % dp:
                continue
            per_dp = global_batch // dp
            scheds = [("none", 1)] if pp == 1 else [("1f1b", 1)]
            if pp > 1 and stage_split(spec.layers, pp, 2) == "even" and framework in ZBV_FRAMEWORKS:
                scheds += [("zbv", 2), ("zb-interleaved", 2)]
            # interleaved over 2, 4 or 8 chunks a stage, where the chunks split the blocks evenly or with the
            # embedding and the loss as chunks of their own (Megatron's account-for-embedding/loss split: Llama 3
            # 405B's 126 blocks on pp16 x v8, which the search had left for 2 chunks on other shapes; outside audit
            # of the planner, 2026-12-06)
            if pp > 1:
                scheds += [("interleaved", v) for v in (2, 4, 8) if stage_split(spec.layers, pp, v) != "uneven"]
            for mb in micro_batches(per_dp):
                m = per_dp // mb
                for sched, v in scheds:
                    if sched in LOOPED and m % pp:
                        continue
                    # layers that pp x v does not divide: the embedding and loss as stages, or short end stages
                    chunk_split = stage_split(spec.layers, pp, v)
                    for zero in (zeros if dp > 1 else (0,)):
                        # flash attention already recomputes its core: selective == none there
                        for rc in ("none", "full") if attention == "flash" else ("none", "selective", "full"):
                            out.append(Layout(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero, sp=tp > 1, schedule=sched,
                                              vpp=v, micro_batch=mb, recompute=rc, precision=precision,
                                              attention=attention, framework=framework, fp8_recipe=fp8_recipe,
                                              tp_overlap=FRAMEWORKS[framework].tp_overlap, stage_split=chunk_split,
                                              # NCCL's own choice of ring or tree for the all-reduce: a ring pays
                                              # every hop's latency (131 ms at 8192 devices, audit 22 F8)
                                              algo="auto"))
    return out


def search(spec: TransformerSpec, hw: Hardware, devices: int, global_batch: int,
           eff: Efficiency | None = None, precision: str = "bf16", framework: str = "megatron",
           fp8_recipe: str = "delayed") -> PlanResult:
    if devices < 1:
        raise ConfigError(f"--devices must be >= 1, got {devices}")
    eff = eff or Efficiency()
    if precision == "fp4":
        fp8_recipe = "nvfp4"
        if "fp4" not in hw.peak_tflops:  # the recipe check below told an fp4 plan to pick an --fp8-recipe, which an
            # fp4 plan does not read; the part has no fp4 at all (planner audit of 2026-12-07)
            raise ConfigError(f"hardware `{hw.name}` has no fp4 peak (it lists: {', '.join(sorted(hw.peak_tflops))})")
    if precision in ("fp8", "fp4"):
        check_recipe_on(fp8_recipe, hw.generation, hw.name)
    layouts = candidate_layouts(spec, hw, devices, global_batch, precision, framework=framework,
                                fp8_recipe=fp8_recipe)
    if not layouts:  # the replica counts the layouts have (every one divides `devices`): say the smallest, which is
        # what a batch below it needs (a 4-way-splittable model on 65,536 devices with a batch of 1 was told "e.g.
        # 65536", never that 16,384 replicas is the fewest it can have; planner audit of 2026-12-07)
        dps = sorted({lay.dp for lay in candidate_layouts(spec, hw, devices, devices, precision, framework=framework,
                                                          fp8_recipe=fp8_recipe)})
        raise ConfigError(f"no layout of {spec.name} on {devices} x {hw.name} divides global batch {global_batch}: "
                          f"its layouts have {first_few((f'{d:,}' for d in dps), 6)} "
                          f"data-parallel replicas, so --global-batch must be a multiple of one of them (the fewest: "
                          f"{dps[0]:,}), or plan fewer devices")
    preds = [predict(spec, lay, hw, global_batch, eff) for lay in layouts]
    notes: list[str] = []
    if not any(p.fits for p in preds) and not hw.cpu:  # nothing fits on the devices: what host offload buys (on a
        # CPU host the device memory is the host's: offloading frees nothing, review of 2026-12-06 H1)
        extra = [v for lay in layouts for v in offload_variants(lay)]
        preds += [predict(spec, lay, hw, global_batch, eff) for lay in extra]
        if extra:
            notes.append(f"no layout fits in device memory: {len(extra)} layouts with {framework}'s host offload "
                         "(optimizer states, sharded parameters) added; the host link and host memory bandwidth are "
                         "the catalog's (offload.py)")
    fits = _ties_by_memory(sorted((p for p in preds if p.fits), key=lambda p: p.step_time_s))
    over = sorted((p for p in preds if not p.fits), key=lambda p: p.step_time_s)
    return PlanResult(fits, over, len(preds),
                      notes + search_notes(layouts, global_batch, devices, framework, bool(fits)))


def default_framework(hw: Hardware) -> str:
    """The framework a part is planned with when none is named: JAX/XLA (MaxText) on a TPU, else Megatron-Core."""
    return "maxtext" if hw.vendor == "google" else "megatron"


FITS_FROM_MOST = 16384  # the largest device count `fits_from` tries


def fits_from(spec: TransformerSpec, hw: Hardware, devices: int, global_batch: int, eff: Efficiency | None = None,
              precision: str = "bf16", framework: str = "megatron", fp8_recipe: str = "delayed",
              most: int = FITS_FROM_MOST) -> tuple[int, Prediction] | None:
    """The fewest devices (doubling from 2 x `devices`, up to `most`) on which some layout fits, with its fastest
    layout; None where none does. The global batch is kept where it divides the count, else the default of that
    count (a batch of 8 sequences cannot spread over 16 replicas). Answers "how many do I need" when nothing fits."""
    n = devices * 2
    while n <= most:
        gb = global_batch if global_batch % n == 0 else default_global_batch(spec, n)
        try:
            res = search(spec, hw, n, gb, eff, precision, framework, fp8_recipe)
        except ConfigError:
            res = None
        if res is not None and res.best is not None:
            return n, res.best
        n *= 2
    return None


def offload_variants(lay: Layout) -> list[Layout]:
    """The host-offload forms of `lay` its framework runs: DeepSpeed's offload_optimizer (ZeRO >= 1) and offload_param
    (ZeRO-3); FSDP's CPU offload (parameters, gradients and optimizer together; fully sharded); Megatron-Core's
    --optimizer-cpu-offload (with the distributed optimizer)."""
    fw, z = lay.framework, lay.zero
    one = lay.dp * lay.cp == 1  # one replica: ZeRO-Offload on one GPU (DeepSpeed stage 2/3 with nothing to shard)
    out = []
    if (fw == "deepspeed" and (z >= 1 or one)) or (fw.startswith("megatron") and (z == 1 or one)):
        out.append(replace(lay, offload_optimizer=True))
    if fw in ("deepspeed", "fsdp1", "fsdp2") and (z == 3 or one):
        out.append(replace(lay, zero=3, offload_optimizer=True, offload_params=True))
    return out


def search_notes(layouts: list[Layout], global_batch: int, devices: int, framework: str, fits: bool) -> list[str]:
    """What limited the search: a framework that runs no tp / pp (when nothing fits, that is why), and a per-replica
    batch with no divisor from 2 to 16 (micro-batches are then 1 or nearly the whole replica's batch)."""
    notes = []
    runs = parallelism(framework)
    if not fits and not (runs.tp and runs.pp):
        missing = " or ".join(n for n, ok in (("tensor", runs.tp), ("pipeline", runs.pp)) if not ok)
        notes.append(f"framework {framework} runs no {missing} parallelism, so no layout splits the model further; "
                     "a framework that does (megatron, fsdp2, deepspeed) may fit it")
    for dp in sorted({lay.dp for lay in layouts}):
        per_dp = global_batch // dp
        if per_dp > 16 and not any(per_dp % d == 0 for d in range(2, 17)):
            mbs = ", ".join(str(m) for m in micro_batches(per_dp))
            better = devices * smooth(global_batch / devices)
            hint = (f"; a global batch such as {better} (a power of two, or three times one, per device) leaves "
                    "many more") if better != global_batch else ""
            notes.append(f"dp{dp}: each replica takes {per_dp} sequences, which has no divisor from 2 to 16, so its "
                         f"micro-batches can only be {mbs}{hint}")
    return notes


TIE = 0.005  # step times within 0.5 % of each other are one speed: the smaller memory ranks first


def _ties_by_memory(ranked: list[Prediction]) -> list[Prediction]:
    """`ranked` (fastest first) with each run of step times within TIE of the run's fastest ordered by memory (a small
    model's micro-batch barely changes its step; the one needing less memory is the better pick)."""
    out: list[Prediction] = []
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j].step_time_s <= ranked[i].step_time_s * (1 + TIE):
            j += 1
        out += sorted(ranked[i:j], key=lambda p: p.peak_mem_gib)
        i = j
    return out


def explain(loser: Prediction, best: Prediction) -> str:
    """One line: how much slower `loser` is than `best` and which breakdown terms cost it."""
    slower = loser.step_time_s / best.step_time_s - 1
    if slower <= 0:  # a tie the best won on memory (`_ties_by_memory`)
        return (f"as fast ({slower * 100:+.1f}%, within {TIE:.1%}) with more memory "
                f"({loser.peak_mem_gib:.1f} against {best.peak_mem_gib:.1f} GiB)")
    deltas = {k: loser.breakdown_s.get(k, 0.0) - best.breakdown_s.get(k, 0.0)
              for k in set(loser.breakdown_s) | set(best.breakdown_s)}
    worst = sorted((kv for kv in deltas.items() if kv[1] > 0), key=lambda kv: -kv[1])[:2]
    terms = ", ".join(f"{k} +{v:.3g}s" for k, v in worst)
    return f"{slower * 100:+.1f}% step time ({terms})" if terms else f"{slower * 100:+.1f}% step time"


def distinct_alternatives(result: PlanResult, n: int = 5) -> list[Prediction]:
    """The best layout of each (tp, pp) shape other than the winner's: the runners-up worth reading."""
    if not result.best:
        return []
    seen = {(result.best.layout.tp, result.best.layout.pp)}
    out = []
    for p in result.ranked[1:]:
        key = (p.layout.tp, p.layout.pp)
        if key not in seen:
            seen.add(key)
            out.append(p)
        if len(out) >= n:
            break
    return out


MAX_DEVICES = 1 << 20  # far above any real job; the layout search walks divisors (1e30 devices did not end)


def parse_fleet(text: str, names: list[str]) -> list[tuple[str, int | None]]:
    """`h100-sxm:64,h200:64,a100-80gb:128` -> [(name, devices)]; a bare name takes --devices."""
    out: list[tuple[str, int | None]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, count = part.partition(":")
        if count:
            try:
                n = int(float(count))
            except (ValueError, OverflowError):  # "inf" was an OverflowError traceback (audit 22, F3)
                raise ConfigError(f"--compare-hardware: `{part}`: the device count must be a whole number") from None
            if n < 1 or n > MAX_DEVICES:
                raise ConfigError(f"--compare-hardware: `{part}`: the device count must be from 1 to {MAX_DEVICES:,}")
            out.append((name.strip(), n))
        else:
            out.append((name.strip(), None))
    if not out:
        raise ConfigError("--compare-hardware: give name:count pairs, e.g. h100-sxm:64,h200:64 "
                          f"(known: {', '.join(names)})")
    return out


def price_note(hw: Hardware, sort: str | None = None) -> str | None:
    """A line where `hw` has no price (price_per_hour_usd = 0, as a --hardware-file entry for hardware one already owns
    may give): its cost reads 0, which ranks it first by cost. A cost of 0 is not counted, not a saving (a $0/h entry
    topped `--sort cost` above every priced part without a word; outside review of the planner). None: priced."""
    if hw.price_per_hour_usd > 0:
        return None
    ranks = ", so by cost it ranks first, ahead of every priced part" if sort == "cost" else ""
    return (f"{hw.name} is priced at 0 USD a device-hour (price_per_hour_usd = 0): its cost reads 0, which means not "
            f"counted{ranks}; give its hourly cost (e.g. amortised) as price_per_hour_usd in a --hardware-file entry "
            "to compare by cost")


def compare_hardware(spec: TransformerSpec, fleet: list[tuple[Hardware, int]], global_batch: int | None,
                     eff: Efficiency | None = None, token_budget: float = 1e12, precision: str = "bf16",
                     sort: str = "time", framework: str | None = None, fits_from_hint: bool = True) -> list[dict]:
    """Best fitting layout per (device type, count), with time (hours) and cost to `token_budget` tokens,
    ranked by time or cost; a device type that cannot run it says why (with `fits_from_hint`, from how many devices
    it fits). `framework` None: each part's own (default_framework)."""
    rows = []
    for hw, devices in fleet:
        gb = global_batch if global_batch is not None else default_global_batch(spec, devices)
        try:
            res = search(spec, hw, devices, gb, eff, precision, framework or default_framework(hw))
        except ConfigError as exc:
            rows.append({"hardware": hw.name, "devices": devices, "reason": str(exc)})
            continue
        best = res.best
        if best is None:  # how close, from how many it fits, and what limited the search (planner audit of
            # 2026-12-07: the row said "no layout fits in memory" and nothing else, where the plan says all three)
            fw = framework or default_framework(hw)
            close = res.closest_not_fitting(1)
            why = "no layout fits in memory"
            if close:
                why += (f" (the closest needs {close[0].peak_mem_gib:,.1f} GiB of "
                        f"{hw.usable_memory_bytes / 2**30:.1f} usable)")
            if fits_from_hint:  # up to a dozen more searches a fleet: a bare --compare-hardware of every part
                # skips it (a 1T model over 54 parts took 84 s against 7)
                found = fits_from(spec, hw, devices, gb, eff, precision, fw)
                at = f" (at global batch {found[1].global_batch:,}, that count's default)" \
                    if found and found[1].global_batch != gb else ""
                why += (f"; fits from {found[0]:,} devices{at}" if found else
                        f"; no doubling of the count up to {FITS_FROM_MOST:,} devices fits it"
                        if 2 * devices <= FITS_FROM_MOST else "")
            why += "".join(f"; {n}" for n in res.notes if n.startswith("framework "))
            rows.append({"hardware": hw.name, "devices": devices, "reason": why})
            continue
        seconds = token_budget / (best.tokens_per_s_per_device * devices)
        rows.append({
            "hardware": hw.name, "devices": devices, "global_batch": gb, "layout": best.layout.short(),
            "step_time_s": best.step_time_s, "tokens_per_s_per_device": best.tokens_per_s_per_device,
            "mfu": best.mfu, "peak_mem_gib": best.peak_mem_gib, "hours_to_budget": seconds / 3600,
            "cost_to_budget_usd": seconds / 3600 * devices * hw.price_per_hour_usd,
            "price_per_device_hour_usd": hw.price_per_hour_usd, "generation": hw.generation,
        })
    key = "cost_to_budget_usd" if sort == "cost" else "hours_to_budget"
    ok = sorted((r for r in rows if "reason" not in r), key=lambda r: r[key])
    return ok + [r for r in rows if "reason" in r]
