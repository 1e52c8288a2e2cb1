"""Step time and memory of a traced stride workload under the layouts the stride trainer runs.

Inputs: a `WorkloadCensus` (census_step.py) of one micro-batch on one rank, a device, efficiency factors
and a `Layout` restricted to what `stride train` can run on any model: data parallel over `dp`
ranks as DDP (`zero=0`) or FSDP2 (`zero=3`: reshard after forward; `zero=2`: keep the gathered
parameters until backward), `micro_batch` samples per forward (gradient accumulation makes up the
rest of the per-rank batch), activation checkpointing of every block (`recompute="full"`).

Time per phase is a sum over its kernels of a summed roofline plus the host's cost per kernel:
  FLOPs / (peak x gemm)  [attention: causal half at `attention`]  + bytes / (memory bw x memory)
  + kernels x kernel_overhead / dispatch
On a CPU the host runs the kernels, so the three add; on an accelerator the host's share hides
under the device time unless it is larger (max of the two, per phase). Step:
  m x (forward + backward [+ recompute]) + optimizer (the traced clip + step; FSDP shards its bytes)
  + data copy + exposed data-parallel communication (+ FSDP2's copy-in/copy-out of each unit).
DDP all-reduces gradient buckets (first 1 MB, then `bucket_mb`, in reverse parameter order) while
backward runs; the last bucket waits for the end of backward. On a CPU whose ranks leave no core free for the
collectives' thread (ranks x (threads + 1) > cores) only a bucket's start-up (the profile's alpha: waiting for the
peer) hides under backward: its bytes are moved and added by the ranks' own cores, instead of the compute (2
gloo ranks pinned a core each: a 3.3 MB MLP's backward took 5.2 ms longer under DDP, 2.3 ms of it while the
trainer counted its comm as hidden). FSDP2 all-gathers each unit (every
block, then the root) before its forward and, resharded, again before its backward, and
reduce-scatters its gradients; all but the first gather overlap compute on an accelerator (CUDA
streams), none on a CPU, where FSDP2 waits for each collective in place; its host work per unit
(hooks, DTensor bookkeeping: the device's measured `fsdp_unit_overhead_us`) adds on a CPU. Collective times come from
a measured `stride comm` profile when the device has one for this group size, else the alpha-beta
link model (collectives.py).
"""

from __future__ import annotations

import dataclasses

from stride.config.errors import ConfigError
from stride.perfmodel import collectives as coll
from stride.perfmodel.census import OUTSIDE, LayerCensus, PhaseCost, WorkloadCensus
from stride.perfmodel.costmodel import GIB, Prediction, _exposed
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.layout import Layout

DDP_FIRST_BUCKET_BYTES = 1 * 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
WORKLOAD_ZERO = {0: "ddp", 2: "fsdp (no reshard)", 3: "fsdp"}


class _Rates:
    def __init__(self, hw: Hardware, eff: Efficiency, precision: str):
        self.hw, self.eff = hw, eff
        dt = "fp32" if precision == "fp32" else "bf16"
        self.peak = hw.peak_flops(dt)
        self.gemm = hw.matmul_efficiency or eff.gemm
        # the precision's own attention and per-kernel factors where calibrated (on a CPU a bf16 step's kernels
        # cost far more than an fp32 step's: efficiency.py), else the shared ones
        self.attention = eff.for_precision("attention", precision)
        self.bw = hw.memory_bw * eff.memory
        self.kernel_s = hw.kernel_overhead_us * 1e-6 / eff.for_precision("dispatch", precision)

    def device(self, pc: PhaseCost) -> float:
        return ((pc.gemm_flops + pc.rnn_flops) / (self.peak * self.gemm)
                + pc.attn_exec_flops / (self.peak * self.attention) + pc.bytes / self.bw)

    def time(self, pc: PhaseCost) -> float:
        host = pc.kernels * self.kernel_s
        dev = self.device(pc)
        return dev + host if self.hw.cpu else max(dev, host)


def check_workload_layout(lay: Layout, trace_batch: int, global_batch: int) -> int:
    """Raise ConfigError for what the trainer cannot run; return micro-batches per step."""
    if lay.tp != 1 or lay.pp != 1 or lay.cp != 1:
        raise ConfigError("traced workloads: only data parallelism (dp, zero) is modelled, not tp/pp/cp")
    if lay.zero not in WORKLOAD_ZERO:
        raise ConfigError(f"traced workloads: zero must be 0 (DDP), 2 or 3 (FSDP2), got {lay.zero}")
    if lay.recompute not in ("none", "full"):
        raise ConfigError(f"traced workloads: recompute must be none or full, got {lay.recompute!r}")
    if lay.micro_batch != trace_batch:
        raise ConfigError(f"layout micro_batch {lay.micro_batch} != traced micro-batch {trace_batch}")
    if global_batch % (lay.dp * lay.micro_batch):
        raise ConfigError(f"global batch {global_batch} is not divisible by dp*micro_batch = "
                          f"{lay.dp}*{lay.micro_batch}")
    return global_batch // (lay.dp * lay.micro_batch)


def _coll_time(hw: Hardware, name: str, nbytes: float, n: int, link: coll.Link, net: float) -> float:
    """Measured profile (slowed by 1/network: a training rank reaches less than the benchmark),
    else the alpha-beta link model (whose link already carries the network factor)."""
    measured = hw.collective_time(name, nbytes, n)
    if measured is not None:
        return measured / net
    if name == "all_reduce":
        return coll.all_reduce_time(nbytes, n, link)
    if name == "all_gather":
        return coll.all_gather_time(nbytes, n, link)
    return coll.reduce_scatter_time(nbytes, n, link)


def cpu_core_free(hw: Hardware, dp: int) -> bool:
    """Whether each CPU rank's collectives thread has a core of its own: ranks on the host x (threads + 1) <= cores
    (the entry's `scaleup_domain` is the probed host's cores, `probed_threads` its threads per process; 1 where not
    probed). Where it has, a bucket's bytes are moved beside the compute, not instead of it."""
    ranks = max(1, min(dp, hw.scaleup_domain))
    return ranks * ((hw.probed_threads or 1) + 1) <= hw.scaleup_domain


def _coll_start(hw: Hardware, name: str, n: int, net: float, whole: float) -> float:
    """The start-up (latency) part of a collective's time `whole`: the measured profile's alpha (`collective_fit`);
    without a profile, none of it."""
    fit = hw.collective_fit(name, n)
    return 0.0 if fit is None else min(whole, fit[0] / net)


def ddp_buckets(trace: WorkloadCensus, bucket_mb: float) -> list[float]:
    """Gradient bytes per DDP bucket, in the order they become ready (reverse registration)."""
    sizes, cur, cap = [], 0.0, float(DDP_FIRST_BUCKET_BYTES)
    for la in reversed(trace.layers):
        if not la.param_bytes:
            continue
        cur += la.param_bytes
        if cur >= cap:
            sizes.append(cur)
            cur, cap = 0.0, bucket_mb * 2**20
    if cur:
        sizes.append(cur)
    return sizes


def fsdp_units(trace: WorkloadCensus) -> list[tuple[str, float]]:
    """(name, parameter bytes) of each FSDP2 unit as stride shards: each block, then the root."""
    blocks = [(la.name, float(la.param_bytes)) for la in trace.layers if la.is_block]
    root = float(sum(la.param_bytes for la in trace.layers if not la.is_block))
    return [*blocks, ("root", root)] if blocks else [("root", root)]


def activation_bytes(trace: WorkloadCensus, recompute: str) -> float:
    """Peak saved-for-backward bytes of one micro-batch (true activations: resident parameter
    and buffer storages that autograd also references are not counted twice).
    Full recompute keeps each block's input and, in backward, one block's activations."""
    if recompute == "none":
        return float(trace.saved_bytes)
    blocks = trace.blocks()
    rest = sum(la.saved_bytes for la in trace.layers if not la.is_block)
    return float(rest + sum(la.input_bytes for la in blocks) + max((la.saved_bytes for la in blocks), default=0))


def predict_workload(trace: WorkloadCensus, lay: Layout, hw: Hardware, global_batch: int,
                     eff: Efficiency | None = None, bucket_mb: float = 25.0,
                     fsdp_param_bytes: int = 4) -> Prediction:
    """Predict one optimizer step of `global_batch` samples (all ranks)."""
    eff = eff or Efficiency()
    m = check_workload_layout(lay, trace.micro_batch, global_batch)
    r = _Rates(hw, eff, trace.precision)
    dp, z = lay.dp, lay.zero
    # ranks sharing a CPU host slow each other (measured `contention_slowdown`)
    slow = hw.contention_slowdown if hw.cpu and dp > 1 else 1.0
    fwd = slow * sum(r.time(la.fwd) for la in trace.layers)
    bwd = slow * sum(r.time(la.bwd) for la in trace.layers)
    rec = slow * sum(r.time(la.fwd) for la in trace.blocks()) if lay.recompute == "full" else 0.0
    sharded = z >= 2 and dp > 1
    opt_pc = trace.optimizer.scaled(1.0)
    if sharded:  # FSDP2: each rank steps its shard; the kernels stay
        opt_pc = dataclasses.replace(opt_pc, bytes=opt_pc.bytes / dp, gemm_flops=opt_pc.gemm_flops / dp)
    t_opt = slow * r.time(opt_pc)
    t_data = m * (trace.batch_bytes / r.bw + 2 * r.kernel_s)

    # ---- data-parallel communication ---------------------------------------------------------
    link = coll.group_link(hw, dp, 1, eff.network)
    comm_bytes: dict[str, float] = {}
    t_comm_exposed = t_copies = t_host = 0.0
    if dp > 1 and z == 0:
        buckets = ddp_buckets(trace, bucket_mb)
        times = [_coll_time(hw, "all_reduce", b, dp, link, eff.network) for b in buckets]
        if hw.cpu and not cpu_core_free(hw, dp):
            # the bytes' part of each bucket is the cores' own work (module docstring); its start-up can hide
            moved = [t - _coll_start(hw, "all_reduce", dp, eff.network, t) for t in times[:-1]]
            t_comm_exposed = times[-1] + sum(moved) + _exposed(sum(times[:-1]) - sum(moved), bwd, eff)
        else:
            t_comm_exposed = times[-1] + _exposed(sum(times[:-1]), bwd, eff)
        comm_bytes[link.name] = sum(coll.all_reduce_bytes_per_device(b, dp) for b in buckets)
        if trace.broadcast_buffer_bytes:  # DDP broadcasts persistent buffers from rank 0 before each
            # forward (stride.parallel.data_parallel); priced as an all-reduce of those bytes (no broadcast profile)
            t_comm_exposed += m * _coll_time(hw, "all_reduce", trace.broadcast_buffer_bytes, dp, link, eff.network)
    elif sharded:
        units = fsdp_units(trace)
        pbytes = [u[1] / 4 * fsdp_param_bytes for u in units]  # gathered in the param dtype
        gbytes = [u[1] for u in units]  # reduced in fp32
        ag = [_coll_time(hw, "all_gather", b, dp, link, eff.network) for b in pbytes]
        rs = [_coll_time(hw, "reduce_scatter", b, dp, link, eff.network) for b in gbytes]
        n_blocks = len(units) - 1
        ag_bwd = sum(ag[:n_blocks]) if z == 3 else 0.0  # blocks re-gather in backward; the root stays
        first = ag[-1]  # the root's gather starts the step: nothing to hide it under
        t_total = m * (sum(ag) + ag_bwd) + sum(rs)
        # FSDP2 overlaps through CUDA streams; on a CPU each collective is waited for in place
        t_comm_exposed = t_total if hw.cpu else first + _exposed(t_total - first, m * (fwd + bwd + rec), eff)
        t_host = m * len(units) * hw.fsdp_unit_overhead_us * 1e-6
        # copy-in before each gather, copy-out after, chunk-cat before each reduce-scatter: memory passes
        t_copies = (m * (sum(pbytes) + (sum(pbytes[:n_blocks]) if z == 3 else 0.0)) * 2 + sum(gbytes) * 2) / r.bw
        if trace.grad_clip:  # the global grad norm of sharded gradients: one scalar all-reduce
            t_comm_exposed += _coll_time(hw, "all_reduce", 4, dp, link, eff.network)
        vol = (dp - 1) / dp * (m * (sum(pbytes) + (sum(pbytes[:n_blocks]) if z == 3 else 0)) + sum(gbytes))
        comm_bytes[link.name] = vol

    if not hw.cpu:  # the host's FSDP work runs ahead of the device unless it is the longer
        t_host = max(0.0, t_host - m * (fwd + bwd + rec))
    step = m * (fwd + bwd + rec) + t_opt + t_data + t_comm_exposed + t_copies + t_host
    breakdown = {"forward": m * fwd, "backward": m * bwd, "recompute": m * rec, "optimizer": t_opt,
                 "data": t_data, "dp_comm": t_comm_exposed, "fsdp_copies": t_copies, "fsdp_host": t_host}

    memory = workload_memory(trace, lay, hw, fsdp_param_bytes)
    peak = sum(memory.values())
    samples = global_batch
    tokens = samples * trace.tokens_per_sample
    mflops = trace.flops * m * dp
    hflops = mflops + (sum(la.fwd.flops for la in trace.blocks()) * m * dp if lay.recompute == "full" else 0.0)
    return Prediction(
        layout=lay, hardware=hw.name, global_batch=global_batch, microbatches=m, step_time_s=step,
        breakdown_s=breakdown, tokens_per_s_per_device=tokens / step / dp,
        mfu=mflops / (step * dp * r.peak), hfu=hflops / (step * dp * r.peak), peak_mem_bytes=peak,
        memory_bytes=memory, fits=hw.fits(peak, lay.devices), comm_bytes_per_device=comm_bytes,
        cost_per_step_usd=step / 3600 * dp * hw.price_per_hour_usd,
    )


def workload_memory(trace: WorkloadCensus, lay: Layout, hw: Hardware, fsdp_param_bytes: int = 4) -> dict[str, float]:
    """Bytes per rank at the step's peak (the end of forward / start of backward)."""
    dp, z = lay.dp, lay.zero
    sharded = z >= 2 and dp > 1
    p = float(trace.param_bytes)
    units = fsdp_units(trace)
    biggest = max(u[1] for u in units)
    if not sharded:
        params, grads, opt = p, p, float(trace.optimizer_state_bytes)
    else:
        gathered = (2 * biggest if z == 3 else p) / 4 * fsdp_param_bytes  # current + prefetched unit
        params = p / dp + gathered
        grads = p / dp + biggest  # one unit's unsharded gradient before its reduce-scatter
        opt = trace.optimizer_state_bytes / dp
    return {
        "params": params, "grads": grads, "optimizer": opt,
        "activations": activation_bytes(trace, lay.recompute),
        "buffers": float(trace.buffer_bytes + trace.batch_bytes),
        "runtime": hw.runtime_overhead_gib * GIB,
    }


# ---- traces at several micro-batch sizes -------------------------------------------------------


def _lerp(a: float, b: float, w: float) -> float:
    return a + (b - a) * w


def _lerp_phase(a: PhaseCost, b: PhaseCost, w: float) -> PhaseCost:
    return PhaseCost(*(_lerp(getattr(a, f.name), getattr(b, f.name), w) for f in dataclasses.fields(PhaseCost)))


def interpolate(a: WorkloadCensus, b: WorkloadCensus, micro_batch: int) -> WorkloadCensus:
    """The trace at `micro_batch` from traces at two other sizes: every traced quantity is affine in
    the batch (FLOPs and activations grow with it; weights read and kernels do not), up to oneDNN's
    page-aligned RNN workspace (tested against a direct trace)."""
    if a.micro_batch == b.micro_batch:
        raise ValueError("interpolate needs traces at two different micro-batch sizes")
    w = (micro_batch - a.micro_batch) / (b.micro_batch - a.micro_batch)
    layers = []
    for la, lb in zip(a.layers, b.layers, strict=True):
        layers.append(LayerCensus(
            la.name, la.params, la.param_bytes, la.is_block, _lerp_phase(la.fwd, lb.fwd, w),
            _lerp_phase(la.bwd, lb.bwd, w),
            *(round(_lerp(getattr(la, k), getattr(lb, k), w)) for k in
              ("saved_bytes", "saved_param_bytes", "saved_buffer_bytes", "input_bytes")),
        ))
    return dataclasses.replace(
        a, micro_batch=micro_batch, layers=layers, batch_bytes=round(_lerp(a.batch_bytes, b.batch_bytes, w)),
        flop_counter_total=round(_lerp(a.flop_counter_total, b.flop_counter_total, w)),
        flop_counter_by_layer={k: round(_lerp(v, b.flop_counter_by_layer[k], w))
                               for k, v in a.flop_counter_by_layer.items()},
    )


__all__ = ["OUTSIDE", "activation_bytes", "ddp_buckets", "fsdp_units", "interpolate", "predict_workload",
           "workload_memory"]
