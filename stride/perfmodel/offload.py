"""Host (CPU) offload: what moving optimizer states, parameters or saved activations to host memory costs a step.

Three mechanisms, each a Layout switch:
- optimizer (DeepSpeed ZeRO-Offload `offload_optimizer: cpu`, FSDP's CPU offload): each rank's gradient shard goes
  to the host as backward produces it (hidden under backward where it fits; DeepSpeed every micro-batch, the running
  sum coming back to be added to), the host runs the optimizer step over
  the shard, streaming its states at host memory bandwidth (DeepSpeed's vectorised CPU Adam is memory-bound: it
  reads the fp32 gradient, master weight and two moments and writes three of them and a 16-bit copy, 30 bytes a
  parameter), and the updated 16-bit weights come back before the next forward (not hidden);
- parameters (ZeRO-3 `offload_param`, FSDP's CPU offload; zero = 3): the shard is copied in before each gather, in
  forward and in backward, for every micro-batch, prefetched under the compute;
- activations (Megatron-Core `cpu_offloading_num_layers`): the first N blocks of a stage copy what they save for
  backward out during forward and back in during backward, each direction hidden under that pass's compute.

The link is the device's host link (PCIe, NVLink-C2C on Grace parts: `Hardware.host_link_gbps`) at
HOST_COPY_EFFICIENCY of its line rate, the fraction pinned-memory copies reach; the host's memory bandwidth is the
device's share (`Hardware.host_memory_gbps`) at CPU_OPTIMIZER_EFFICIENCY. These two fractions are assumed, not
fitted: no development row offloads (docs/perfmodel.md, "Host offload").
"""

from __future__ import annotations

from dataclasses import dataclass

from stride.perfmodel.block_time import exposed
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.layout import Layout

# pinned host<->device copies reach about 80% of the PCIe line rate (25-26 of Gen4 x16's 32 GB/s in bandwidthTest
# and nvbandwidth reports): assumed for every host link
HOST_COPY_EFFICIENCY = 0.8
# bytes an Adam step moves per parameter on the host: fp32 gradient, master weight, two moments read (16); master and
# moments written (12); the 16-bit copy the device gets back written (2)
CPU_ADAM_BYTES_PER_PARAM = 30.0
# share of the host memory bandwidth a vectorised CPU optimizer sustains beside the copies (assumed)
CPU_OPTIMIZER_EFFICIENCY = 0.5


@dataclass
class OffloadTime:
    """Seconds a step spends on host offload: `exposed` adds to the step; `optimizer` replaces the device step."""

    exposed: float = 0.0
    optimizer: float | None = None  # the host's optimizer step, where the optimizer is offloaded
    bytes_moved: float = 0.0  # host<->device bytes a step, both directions


def offload_time(lay: Layout, hw: Hardware, eff: Efficiency, *, opt_params: float, grad_bytes: int,
                 weight_bytes: int, param_shard_bytes: float, microbatches: int, act_bytes_per_block: float,
                 offloaded_blocks: int, forward_s: float, backward_s: float, step_compute_s: float) -> OffloadTime:
    """Host offload of one step on the slowest device. `opt_params`: parameters this rank updates; `param_shard_bytes`:
    its parameter shard as held on the host; `act_bytes_per_block`: what one block saves per micro-batch;
    `forward_s` / `backward_s`: one micro-batch's forward and backward on the stage; `step_compute_s`: the step's
    compute, under which parameter prefetches run."""
    out = OffloadTime()
    if not (lay.offload_optimizer or lay.offload_params or lay.offload_activations):
        return out
    link = hw.host_link_bytes_per_s * HOST_COPY_EFFICIENCY
    if lay.offload_optimizer:
        # DeepSpeed accumulates a step's micro-batches on the host: each micro-batch's gradient shard goes out, and
        # the sum so far comes back to be added to (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu); the
        # other frameworks accumulate on the device and send the step's sum once
        outs, backs = (microbatches, microbatches - 1) if lay.framework == "deepspeed" else (1, 0)
        d2h = outs * opt_params * grad_bytes / link
        back = backs * opt_params * grad_bytes / link
        h2d = 0.0 if lay.offload_params else opt_params * weight_bytes / link  # else: in with the next gathers
        out.optimizer = opt_params * CPU_ADAM_BYTES_PER_PARAM / (hw.host_memory_bytes_per_s * CPU_OPTIMIZER_EFFICIENCY)
        out.exposed += exposed(d2h, outs * backward_s, eff) + exposed(back, backs * forward_s, eff) + h2d
        out.bytes_moved += opt_params * ((outs + backs) * grad_bytes + (0 if lay.offload_params else weight_bytes))
    if lay.offload_params:
        h2d = microbatches * 2 * param_shard_bytes / link
        out.exposed += exposed(h2d, step_compute_s, eff)
        out.bytes_moved += microbatches * 2 * param_shard_bytes
    if lay.offload_activations and offloaded_blocks:
        one_way = offloaded_blocks * act_bytes_per_block / link
        out.exposed += microbatches * (exposed(one_way, forward_s, eff) + exposed(one_way, backward_s, eff))
        out.bytes_moved += microbatches * 2 * offloaded_blocks * act_bytes_per_block
    return out
