"""Peak memory per device, with the framework's state layout and allocator behaviour.

Model and optimizer states per parameter on the device (Megatron/DeepSpeed: 16-bit weights, fp32
main gradients or 16-bit ones, fp32 master + Adam moments sharded by the ZeRO stage; FSDP and
MaxText: everything sharded in fp32, 16-bit copies only of the units in use; torchtune: pure bf16;
DDP: fp32 weights and gradients plus its bucket copies), activations saved for backward
(activations.py, Korthikanti et al. 2022, for fused kernels; eager PyTorch keeps more: RMSNorm's
normalised output, RoPE's rotated q and k, the attention output's contiguous copy, an unfused gated
product: 5h + f more 16-bit values per token), times the micro-batches in flight on the first
pipeline stage, the logits (bf16 + fp32 softmax + its gradient unless the loss is fused/chunked),
gathered units under ZeRO-3/FSDP (the current and the prefetched one), and a backward scratch.

`allocated` is what the caching allocator hands out (torch.cuda.max_memory_allocated, "active");
`reserved` adds its fragmentation slack (max_memory_reserved); `device` adds the device's runtime
overhead (CUDA context, cuBLAS workspaces: the catalog's runtime_overhead_gib) and the NCCL communicators'
buffers, which NCCL allocates itself, outside the caching allocator (`nccl_buffer_bytes`); what nvidia-smi shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from stride.perfmodel.activations import layer_activation_bytes
from stride.perfmodel.flops import layer_params
from stride.perfmodel.frameworks import FRAMEWORKS
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.qlora import frozen_bytes_per_param, stored_bytes

GIB = 2**30


@dataclass
class Memory:
    components: dict[str, float]  # allocated bytes by kind, on the worse stage
    allocated: float
    reserved: float
    device: float


def eager_saved_per_token(spec: TransformerSpec, f: int) -> float:
    """16-bit values per token and block that eager PyTorch saves beyond fused kernels: each RMSNorm's
    normalised output (LayerNorm's kernel keeps only its input and statistics), RoPE's rotated q and
    k, the attention output's contiguous copy, an unfused gated product's activation output."""
    rms = 2 * spec.hidden if not spec.bias else 0
    rope = spec.q_dim + spec.kv_dim if not spec.learned_pos else 0
    return rms + rope + spec.q_dim + (f if spec.gated else 0)


def _states(lay: Layout, params: float, gbytes: int, at_step: bool = False, frozen_w: float | None = None
            ) -> dict[str, float]:
    """Weights, gradients and optimizer state bytes for `params` parameters on one device; frozen (LoRA) weights
    have neither gradients nor optimizer state (the adapters' are left out: < 0.1% of the weights); `frozen_w`: the
    bytes a frozen parameter occupies where not the precision's (QLoRA's 4-bit blocks, qlora.frozen_bytes_per_param).

    `at_step`: during the optimizer step rather than forward/backward. They differ where Megatron keeps 16-bit
    gradients (fp16 without --accumulate-allreduce-grads-in-fp32, the default; bf16 where the reduction is 16-bit):
    both its optimizers make the fp32 copy of the gradients at the step (`_copy_model_grads_to_main_grads`:
    `main_param.grad = model_param.main_grad.float()`, a copy only where the buffer is 16-bit) and drop it at the
    next `zero_grad(set_to_none=True)`, so it never meets the activations. Counting it at the activation peak read
    the Vocabulary Parallelism paper's 24 fp16 1F1B rows (blind round 16) 9-29% high; their growth with the
    vocabulary, 16-17 bytes per embedding parameter, is 2 + 2 + 12 without it. DeepSpeed's ZeRO optimizers keep
    buffers of their own (the round-16 review found ZeRO-0 fp16 holding about 8 bytes more a parameter at the step),
    so fp16 keeps the copy counted throughout there: the one development row, Megatron-DeepSpeed GPT 1.3B fp16 on 16
    V100, reads -6% so and -18% without it."""
    fw = FRAMEWORKS[lay.framework]
    if lay.frozen:
        w = frozen_w or (4.0 if lay.precision in ("fp32", "tf32") else 2.0)
        return {"params": w * params / (lay.state_shards if lay.zero == 3 else 1), "grads": 0.0, "optimizer": 0.0}
    dp, z = lay.state_shards, lay.zero  # hybrid sharding: states shard over the shard group (x cp) only
    if lay.precision in ("fp32", "tf32"):
        w, g, o = 4.0, 4.0, 8.0
    elif not fw.master_weights or lay.pure_bf16:
        w, g, o = 2.0, 2.0, 4.0  # bf16 weights, gradients, Adam moments
    elif lay.framework in ("fsdp1", "fsdp2", "maxtext", "ddp"):
        w, g, o = 4.0, 4.0, 8.0  # fp32 sharded parameters are the master copy
    else:
        # 16-bit weights, fp32 master weights and Adam moments (12 bytes), and the fp32 gradient copy (4)
        if lay.framework.startswith("megatron"):  # the fp32 gradient copy only at the step (docstring)
            o = 16.0 if gbytes == 2 and at_step else 12.0
        else:  # DeepSpeed: counted throughout, as before (docstring)
            o = 16.0 if lay.precision == "fp16" else 12.0
        w, g = 2.0, float(gbytes)
    fsdp = lay.framework in ("fsdp1", "fsdp2", "maxtext")
    states = {
        "params": w * params / (dp if z == 3 or (fsdp and z == 2) else 1),  # FSDP shards its fp32 weights
        "grads": g * params / (dp if z >= 2 else 1),
        "optimizer": o * params / (dp if z >= 1 else 1),
    }
    if lay.framework in ("fsdp1", "fsdp2") and z == 2:
        states["params"] += 2.0 * params  # SHARD_GRAD_OP keeps the bf16 unsharded weights after forward
        if lay.pp > 1 and lay.framework == "fsdp2":
            # under a pipeline schedule FSDP2 reduces gradients on the last micro-batch only
            # (torch.distributed.pipelining: gradient sync off until then): the unsharded gradients of the whole
            # stage are held across the step, in the reduce dtype: FSDPParam.to_accumulated_grad_if_needed
            # (torch/distributed/fsdp/_fully_shard/_fsdp_param.py) casts the unsharded 16-bit gradient to
            # reduce_dtype (torchtitan: fp32) into `unsharded_accumulated_grad` and adds later micro-batches to it
            states["grads"] += float(gbytes) * params
    if lay.framework == "ddp" and z == 0 and dp > 1:
        states["grads"] += 4.0 * params  # DDP buckets copy the gradients (gradient_as_bucket_view=False)
    if lay.offload_optimizer:  # the fp32 master copy and the moments live on the host (offload.py)
        states["optimizer"] = 0.0
        if lay.framework == "deepspeed":  # each reduced gradient partition is copied to the host's fp32 buffer as
            # the backward produces it (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu): the
            # device holds the reduction buckets (the buffers' share), not the partition
            states["grads"] = 0.0
    if lay.offload_params:  # sharded weights on the host; the gathered units are the buffers' (predict_memory)
        states["params"] = 0.0
        if fsdp:  # FSDP's CPU offload moves the sharded gradients to the host as they are reduced
            states["grads"] = 0.0
    return states


# Device memory of one NCCL communicator once it has run a collective, as measured through PyTorch on 4 A100 with
# NVLink (NVIDIA/nccl#964, 2023): 544 MiB for a 2-rank group, 688 MiB for a larger one. It is NCCL's own FIFOs per
# channel and connection (src/init.cc:810-813: 4 MiB Simple + 4.69 MiB LL128 + 0.5 MiB LL = 9.19 MiB each), which
# grow with the channels and the peers a communicator connects, not with the model; NCCL allocates them outside
# torch's caching allocator, so max_memory_reserved does not count them and nvidia-smi does (fairscale
# utils/parallel.py get_process_group_cached; NVIDIA/nccl#864: "more communicators = more memory used").
NCCL_COMM_BYTES = {2: 544 * 2**20, 3: 688 * 2**20}


def nccl_buffer_bytes(lay: Layout, hw: Hardware) -> float:
    """NCCL (RCCL on AMD) buffers on one device: the default (world) group, which every job's barriers and
    logging reductions use, and one communicator per parallel dimension that is neither 1 nor the whole world
    (data / FSDP, tensor, pipeline, context, expert parallel groups). None on one device, a TPU or a CPU host."""
    n = lay.devices
    if n <= 1 or hw.cpu or hw.vendor not in ("nvidia", "amd"):
        return 0.0
    groups = [n] + [d for d in (lay.dp, lay.tp, lay.pp, lay.cp, lay.ep) if 1 < d < n]
    return float(sum(NCCL_COMM_BYTES[min(g, 3)] for g in groups))


def _saved_mode(lay: Layout) -> str:
    """The recompute mode as what backward keeps: full-like modes keep a block's input, mlp-in keeps all."""
    rc = "full" if lay.recompute in ("full", "mlp", "full-except-qkv") else lay.recompute
    return "none" if rc == "mlp-in" else rc


def saved_per_block(spec: TransformerSpec, lay: Layout, fused: bool) -> tuple[float, float]:
    """Bytes one block saves for backward per micro-batch on one device: (with the layout's recompute, without
    any). Routed MoE copies, eager PyTorch's extra saved tensors and FP8's 1-byte saved inputs included."""
    act = 2 if lay.precision in ("fp32", "tf32") else 1
    tokens = lay.micro_batch * spec.seq / lay.cp
    flash = lay.attention == "flash"
    t = lay.tp
    rc = _saved_mode(lay)
    a_layer = act * layer_activation_bytes(spec, lay.micro_batch, t, lay.sp, lay.cp, rc, flash)
    a_full = act * layer_activation_bytes(spec, lay.micro_batch, t, lay.sp, lay.cp, "none", flash)
    f = spec.expert_ffn if spec.moe else spec.ffn
    mlp = 2 * tokens * (3 * f if spec.gated else 2 * f) / t
    if spec.moe:  # routed copies of the MLP activations (top-k x capacity), on the MoE fraction
        extra = (spec.top_k * spec.capacity - 1) * mlp * spec.moe_layers / spec.layers
        a_full += extra
        a_layer += extra if rc == "none" else 0.0
    if not (fused or lay.compile):
        eager = 2 * tokens * eager_saved_per_token(spec, f) / t
        a_full += eager
        a_layer += eager if rc in ("none", "selective") else 0.0
    if lay.precision in ("fp8", "fp4") and rc in ("none", "selective"):
        a_layer -= tokens * (2 * spec.hidden / (t if lay.sp else 1) + (spec.q_dim + f) / t)  # FP8 saved inputs
    return a_layer, a_full


def predict_memory(spec: TransformerSpec, lay: Layout, hw: Hardware, devices: list[tuple[int, float, float, bool]],
                   gbytes: int, fused: bool, rc_share: float = 1.0) -> Memory:
    """Peak of the fullest pipeline device. `devices`: per device its blocks, parameters, micro-batches in flight
    and whether it computes the logits. The first device holds the most micro-batches, the last the logits, but
    where the first and last stages hold fewer blocks (Megatron's embedding/loss split, uneven splits) the second
    holds the most activations: the Zero Bubble paper's 1F1B runs (round 12, layers = k p - 2) measured 30-72 GB
    where device 0 alone gave 12-25 GB. `rc_share`: the share of blocks that recompute (Megatron's block
    method), the others keep all their activations."""
    fw = FRAMEWORKS[lay.framework]
    tokens = lay.micro_batch * spec.seq / lay.cp
    t = lay.tp
    rc = _saved_mode(lay)
    a_layer, a_full = saved_per_block(spec, lay, fused)
    f = spec.expert_ffn if spec.moe else spec.ffn
    gated_in = 2 * f if spec.gated else f
    scratch = 2 * tokens * gated_in / t * 2  # backward of the MLP: input-gradient and product buffers
    per_logit = 4.0 if lay.fused_loss else (2.0 + 8.0 if fw.ce_bytes_per_logit > 8 else 4.0)
    logits = tokens * spec.vocab / t * per_logit
    if lay.linear_loss:  # one chunk of fp32 logits, about a hidden state's size (Liger sizes its chunks so), and the
        logits = tokens * spec.hidden / t * (4.0 + 2.0)  # input's gradient the op computes in its forward
    gathered = 0.0
    frozen_w = frozen_bytes_per_param(spec, lay.base_double_quant) if lay.qlora else None
    if lay.zero == 3:  # current and prefetched unit, bf16 weights and their unsharded gradients
        wire = 1.0 if lay.fp8_gather else stored_bytes(lay.base_double_quant) if frozen_w else 2.0
        gathered = 2 * layer_params(spec, spec.moe) / t / max(1, lay.ep if spec.moe else 1) * (wire + gbytes)

    a_mean = rc_share * a_layer + (1 - rc_share) * a_full

    def stage(n_blocks: int, p: float, k: float, with_logits: bool) -> dict[str, float]:
        # offloaded blocks (Megatron's cpu_offloading_num_layers) leave the device; one block's worth stays in flight
        out = min(lay.offload_activations, n_blocks)
        # a recomputing block re-materialises what it did not save, one block at a time (its saved part is counted
        # already: full recompute's input; selective with a flash core saves as much as none, so nothing more)
        acts = k * (n_blocks - out) * a_mean + (a_mean if out else 0.0) + (a_full - a_layer if rc != "none" else 0.0)
        train = {**_states(lay, p, gbytes, frozen_w=frozen_w), "activations": acts,
                 # current and prefetched unit: one where the stage holds one block (audit 22, F6: counted twice)
                 "buffers": scratch + gathered * min(2, max(n_blocks, 1)) / 2 + (logits if with_logits else 0.0)}
        step = {**_states(lay, p, gbytes, at_step=True, frozen_w=frozen_w), "activations": 0.0, "buffers": 0.0}
        return max(train, step, key=lambda parts: sum(parts.values()))

    worst = max((stage(*d) for d in devices), key=lambda parts: sum(parts.values()))
    allocated = sum(worst.values())
    reserved = allocated * fw.allocator_slack
    return Memory(worst, allocated, reserved, reserved + hw.runtime_overhead_gib * GIB + nccl_buffer_bytes(lay, hw))
