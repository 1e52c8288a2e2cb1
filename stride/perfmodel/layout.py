"""A parallel layout: how one training step is split over devices, and how it is run."""

from __future__ import annotations

from dataclasses import dataclass

from stride.config.errors import ConfigError
from stride.perfmodel.attention_kernels import KERNELS
from stride.perfmodel.flops import RECOMPUTE_MODES as _BASE_RECOMPUTE
from stride.perfmodel.frameworks import FRAMEWORKS
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.precision import RECIPES

SCHEDULES = ("none", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-interleaved", "zbv", "v-half", "v-min")
# Zero-bubble schedules split each backward into B (input gradients) and W (weight gradients) and fill the 1F1B
# bubble with W (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): ZB-H1 (1F1B's memory, a third of its
# bubble), ZB-H2 (about twice 1F1B's activations, no bubble). The V-shape schedules ("Pipeline Parallelism with
# Controllable Memory", Qi et al., NeurIPS 2024) put two chunks on each device, the first and the last on device 0:
# V-ZB (`zbv`, torch.distributed.pipelining's ScheduleZBVZeroBubble: 1F1B's memory, no bubble), V-Half (half the
# activations), V-Min (a third).
V_SHAPE = ("zbv", "v-half", "v-min")
# Looped over vpp chunks per device as the interleaved schedule is: interleaved 1F1B, and zero bubble interleaved
# (torch.distributed.pipelining's ScheduleInterleavedZeroBubble, stride's `zero_bubble`: ZB-H1's W filling on the
# interleaved schedule's stages)
LOOPED = ("interleaved", "zb-interleaved")
PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "fp32", "tf32")  # tf32: fp32 storage, GEMMs on TF32 tensor cores
FP32_STORAGE = ("fp32", "tf32")
ATTENTION = ("flash", "materialized")
# what recompute re-runs in backward: none; selective = the attention core; full = the block;
# mlp = the MLP and the attention core (MaxText custom policies that offload q/k/v/out);
# mlp-in = the MLP input projections (MaxText save_dot_except_mlpwi); full-except-qkv (qkv_proj_offloaded);
# op-sac = torchtitan's per-op selective checkpointing: every other matmul of a block (block_time.op_sac_share)
RECOMPUTE_MODES = (*_BASE_RECOMPUTE, "mlp", "mlp-in", "full-except-qkv", "op-sac")
RECOMPUTED_GEMMS = {
    "none": (), "selective": ("attn_scores", "attn_values"),
    "full": ("qkv", "attn_scores", "attn_values", "attn_out", "mlp_in", "mlp_out", "router", "expert_in", "expert_out"),
    "mlp": ("attn_scores", "attn_values", "mlp_in", "mlp_out", "router", "expert_in", "expert_out"),
    "mlp-in": ("mlp_in", "expert_in"),
    "full-except-qkv": ("attn_scores", "attn_values", "attn_out", "mlp_in", "mlp_out", "router", "expert_in",
                        "expert_out"),
    "op-sac": ("qkv", "attn_out", "mlp_in", "mlp_out", "expert_in", "expert_out"),  # in part: op_sac_share
}
STAGE_SPLITS = ("even", "uneven", "embedding-loss")


def stage_split(layers: int, pp: int, vpp: int) -> str:
    """How `layers` blocks fall on pp x vpp stages: evenly; with the embedding and the loss counted as a stage
    each where that divides (Megatron's account-for-embedding/loss split); else unevenly."""
    if layers % (pp * vpp) == 0:
        return "even"
    return "embedding-loss" if (layers + 2) % (pp * vpp) == 0 else "uneven"


@dataclass(frozen=True)
class Layout:
    """dp x tp x pp x cp devices. `zero` is the ZeRO stage over the dp group (3 = FSDP); `ep`
    experts-parallel ranks are carved out of dp (MoE models)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero: int = 0
    sp: bool = False
    schedule: str = "none"
    vpp: int = 1  # virtual stages per device (interleaved schedule; 2 for the V-shape ones)
    micro_batch: int = 1
    recompute: str = "none"
    precision: str = "bf16"
    attention: str = "flash"
    attn_kernel: str = "auto"  # fused attention kernel (attention_kernels.KERNELS); auto: the framework's on the part
    dp_overlap: bool = True  # overlap gradient reduction with backward
    tp_overlap: bool = False  # overlap TP collectives with GEMMs (e.g. Transformer Engine userbuffers)
    algo: str = "ring"  # all-reduce algorithm: ring | tree | auto
    ep: int = 1
    framework: str = "megatron"
    fp8_recipe: str = "delayed"
    fp8_head: bool = False  # the LM head GEMM in FP8 too
    fp8_gather: bool = False  # FSDP all-gathers FP8 weights (torchao tensorwise)
    stage_split: str = "even"  # how blocks fall on pipeline stages when layers % (pp*vpp) != 0
    compile: bool = False  # torch.compile: elementwise ops fused
    fused_loss: bool = False  # chunked / fused cross-entropy: no fp32 logits
    linear_loss: bool = False  # LM head fused into the loss chunk by chunk: no logits held (frameworks.linear_loss)
    # uncompiled model code whose RMSNorm / rotary embedding run as chains of PyTorch ops (Hugging Face transformers,
    # torchtitan, torchtune, litgpt: kernels.Costs.elementwise_per_token), not one kernel each
    eager_norm: bool = False
    eager_rope: bool = False
    # each TP all-gather / reduce-scatter also copies the gathered activation (torchtitan before its dim-0 sequence
    # sharding: row_text.torchtitan_tp_copies)
    tp_copies: bool = False
    # Megatron-Core's GPT-OSS experts without the op fuser: a clamp + cat before the fused activation and an fp32 bias
    # pass after fc2 on every routed row (row_text.megatron_eager_expert_epilogue; kernels.EXPERT_EPILOGUE_BYTES)
    eager_expert_epilogue: bool = False
    grad_reduce_fp32: bool | None = None  # None: the framework's default
    # hybrid sharding (HSDP, MaxText ici_fsdp x dcn_data_parallelism): ZeRO states sharded over groups of
    # `shard` data-parallel ranks (0: all of dp), replicated over dp / shard groups whose gradients are
    # all-reduced once per step
    shard: int = 0
    # Megatron/NeMo --recompute-method block --recompute-num-layers N: only the first N blocks of each (virtual)
    # pipeline stage recompute (0: every block)
    recompute_layers: int = 0
    # LoRA / PEFT: base weights frozen, only small adapters train: no weight-gradient GEMMs, gradient reduction
    # or optimizer step for the base parameters
    frozen: bool = False
    # LoRA adapters on the frozen base (lora_rank 0: none costed): rank, which linears carry one ("attention": qkv
    # and the attention output projection; "mlp"; "all") and the adapter-input dropout probability
    lora_rank: int = 0
    lora_targets: str = "attention"
    lora_dropout: float = 0.0
    # QLoRA: the frozen base weights of the blocks stored in 4 bits (bitsandbytes NF4/FP4; double quantisation of
    # their constants or not), dequantised for every matmul (qlora.py)
    base_4bit: bool = False
    base_double_quant: bool = False
    # weights, gradients and AdamW states all 16-bit, no fp32 master copy (a model loaded in bf16 and trained so, as
    # Hugging Face's Trainer does without amp): what the framework profile says otherwise (torchtune's is)
    pure_bf16: bool = False
    # NCCL channels (CTAs) the context-parallel communicator may use (0: NCCL's own choice, enough for the link's
    # bus bandwidth); MLPerf's NeMo configs cap it at 1 (conf/nccl/custom_communicator_cta.yaml `cp: max_ctas: 1`)
    cp_channels: int = 0
    # DeepSpeed-Ulysses (all-to-all, head-parallel attention) degree inside cp: its ranks swap the sequence split of
    # q, k, v for a head split before the attention core and back after it; the other cp / ulysses ranks run the
    # framework's context parallelism (ring or all-gather) as before (USP's Ulysses x ring hybrid;
    # Megatron-Core --cp-comm-type a2a is ulysses = cp)
    ulysses: int = 1
    # context parallelism over contiguous chunks of the sequence with no load balancing (MaxText's
    # context_parallel_load_balance off; Megatron's and torchtitan's zigzag / round-robin split on by default): under
    # the causal mask the rank holding the last chunk attends to every earlier one, (2r - 1) / r of the mean work over
    # r ring or all-gather ranks, and every rank waits for it (block_time)
    cp_unbalanced: bool = False
    # host (CPU) offload (offload.py): the optimizer states and step on the host (DeepSpeed ZeRO-Offload
    # `offload_optimizer`, FSDP's CPU offload); the sharded parameters on the host, copied in for each gather
    # (ZeRO-3 `offload_param`, FSDP's CPU offload; needs zero = 3); the saved activations of the first N blocks of
    # each stage copied out in forward and back in backward (Megatron-Core `cpu_offloading_num_layers`)
    offload_optimizer: bool = False
    offload_params: bool = False
    offload_activations: int = 0

    @property
    def qlora(self) -> bool:
        """Frozen base weights stored in 4 bits: what the time, memory and gather costs of QLoRA key on."""
        return self.frozen and self.base_4bit

    @property
    def shard_dp(self) -> int:
        """Data-parallel ranks the ZeRO/FSDP states are sharded over."""
        return self.shard if 0 < self.shard < self.dp else self.dp

    @property
    def state_shards(self) -> int:
        """Ranks the ZeRO/FSDP states shard over and the gradients reduce-scatter over: the shard group times cp,
        since context-parallel ranks hold the same weights and each computes part of every gradient
        (Megatron-Core's dp-cp group: parallel_state.get_data_parallel_group(with_context_parallel=True);
        torchtitan's dp_shard_cp mesh)."""
        return self.shard_dp * self.cp

    @property
    def v_shape(self) -> bool:
        """A V-shape schedule: 2 chunks a device, device 0 holding the first and the last (embedding and head)."""
        return self.schedule in V_SHAPE

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def short(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}{'+sp' if self.sp else ''}", f"pp{self.pp}"]
        if self.pp > 1:
            parts.append(self.schedule + (f"v{self.vpp}" if self.schedule in LOOPED else ""))
        if self.cp > 1:
            parts.append(f"cp{self.cp}" + (f"/ulysses{self.ulysses}" if self.ulysses > 1 else ""))
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        prec = self.precision + (f"-{self.fp8_recipe}" if self.precision in ("fp8", "fp4") else "")
        zero = f"zero{self.zero}" + (f"/{self.shard_dp}" if self.shard_dp < self.dp else "")
        rc = f"rc-{self.recompute}" + (f"x{self.recompute_layers}" if self.recompute_layers else "")
        prec += "-pure" if self.pure_bf16 else ""
        parts += [zero, f"mb{self.micro_batch}", rc, prec] + (["frozen"] if self.frozen else []) + (
            [f"lora{self.lora_rank}"] if self.lora_rank else [])
        offload = [w for w, on in (("optimizer", self.offload_optimizer), ("params", self.offload_params),
                                   (f"act{self.offload_activations}", self.offload_activations)) if on]
        return " ".join(parts + ([f"offload-{'+'.join(offload)}"] if offload else []))


def stage_blocks(layers: int, pp: int, vpp: int = 1, split: str = "even", v_shape: bool = False) -> list[int]:
    """Transformer blocks on each pipeline device (its virtual stages summed; `v_shape`: device d holds chunks d
    and 2 pp - 1 - d, not d and d + pp).

    even: layers / (pp vpp) per virtual stage. embedding-loss (Megatron's
    --account-for-embedding/loss-in-pipeline-split): the embedding and the loss count as one block
    each, so the first and the last virtual stage hold one block fewer. uneven: as even as
    possible, the first and last stages short (--decoder-first/last-pipeline-num-layers)."""
    chunks = pp * vpp
    if split == "embedding-loss":
        per = [(layers + 2) // chunks] * chunks
        per[0] -= 1
        per[-1] -= 1
    else:
        base, rem = divmod(layers, chunks)
        per = [base] * chunks
        order = list(range(1, chunks - 1)) + [0, chunks - 1] if chunks > 2 else list(range(chunks))
        for i in order[:rem]:
            per[i] += 1
    if v_shape:
        return [per[d] + per[chunks - 1 - d] for d in range(pp)]
    return [sum(per[d::pp]) for d in range(pp)]


def check_layout(layout: Layout, spec: TransformerSpec, global_batch: int) -> int:
    """Raise ConfigError naming the first inconsistency; return the micro-batch count per step."""
    lay = layout
    for name in ("dp", "tp", "pp", "cp", "vpp", "micro_batch", "ep", "ulysses"):
        v = getattr(lay, name)
        if not isinstance(v, int) or v < 1:
            raise ConfigError(f"layout: `{name}` must be an integer >= 1, got {v!r}")
    if not isinstance(lay.recompute_layers, int) or lay.recompute_layers < 0:
        raise ConfigError(f"layout: `recompute_layers` must be an integer >= 0, got {lay.recompute_layers!r}")
    if lay.zero not in (0, 1, 2, 3):
        raise ConfigError(f"layout: `zero` must be 0, 1, 2 or 3, got {lay.zero!r}")
    if not isinstance(lay.offload_activations, int) or isinstance(lay.offload_activations, bool) \
            or lay.offload_activations < 0:
        raise ConfigError(f"layout: `offload_activations` must be an integer >= 0 (blocks per stage), got "
                          f"{lay.offload_activations!r}")
    if lay.offload_params and lay.zero != 3:
        raise ConfigError(f"layout: offloading the parameters needs them sharded (zero = 3, FSDP), not zero = "
                          f"{lay.zero}: unsharded parameters are used whole by every rank")
    for name, allowed in (("schedule", SCHEDULES), ("recompute", RECOMPUTE_MODES), ("precision", PRECISIONS),
                          ("attention", ATTENTION), ("stage_split", STAGE_SPLITS), ("fp8_recipe", RECIPES),
                          ("attn_kernel", ("auto", *KERNELS)),
                          ("framework", tuple(FRAMEWORKS))):
        if getattr(lay, name) not in allowed:
            raise ConfigError(f"layout: {name} must be one of {', '.join(allowed)}, got {getattr(lay, name)!r}")
    if lay.algo not in ("ring", "tree", "auto"):
        raise ConfigError(f"layout: algo must be ring, tree or auto, got {lay.algo!r}")
    if lay.pp > 1 and lay.schedule == "none":
        raise ConfigError(f"layout: pp > 1 needs a schedule ({', '.join(SCHEDULES[1:])})")
    if lay.schedule in LOOPED and lay.vpp < 2:
        raise ConfigError(f"layout: the {lay.schedule} schedule needs vpp >= 2")
    if lay.v_shape and lay.vpp != 2:
        raise ConfigError(f"layout: the V-shape schedule {lay.schedule} puts 2 chunks on each device: vpp=2, "
                          f"not {lay.vpp}")
    if lay.schedule not in (*LOOPED, *V_SHAPE) and lay.vpp != 1:
        raise ConfigError(f"layout: vpp={lay.vpp} needs an interleaved or a V-shape schedule")
    if spec.heads % lay.tp or spec.kv_heads % lay.tp and lay.tp % spec.kv_heads:
        raise ConfigError(f"layout: tp={lay.tp} does not divide heads={spec.heads} / kv_heads={spec.kv_heads}")
    chunks = lay.pp * lay.vpp
    if lay.stage_split == "even" and spec.layers % chunks:
        raise ConfigError(f"layout: layers={spec.layers} is not divisible by pp*vpp={chunks} "
                          "(uneven stages: stage_split='uneven' or 'embedding-loss')")
    if spec.layers + (2 if lay.stage_split == "embedding-loss" else 0) < chunks:
        raise ConfigError(f"layout: layers={spec.layers} is fewer than pp*vpp={chunks} pipeline stages")
    if lay.stage_split == "embedding-loss" and (spec.layers + 2) % chunks:
        raise ConfigError(f"layout: layers+2={spec.layers + 2} (embedding and loss as stages) is not divisible "
                          f"by pp*vpp={chunks}")
    if spec.seq % lay.cp:
        raise ConfigError(f"layout: seq={spec.seq} is not divisible by cp={lay.cp}")
    if lay.cp % lay.ulysses or (spec.heads // lay.tp) % lay.ulysses:
        raise ConfigError(f"layout: the Ulysses degree {lay.ulysses} must divide cp={lay.cp} and the "
                          f"{spec.heads // lay.tp} attention heads of each tensor-parallel rank")
    if lay.shard and (lay.shard < 0 or lay.dp % lay.shard):
        raise ConfigError(f"layout: shard group {lay.shard} must divide dp={lay.dp}")
    if lay.sp and lay.tp == 1:
        raise ConfigError("layout: sequence parallel needs tp > 1")
    if lay.ep > 1 and (not spec.moe or spec.experts % lay.ep or (lay.dp * lay.cp * lay.tp) % lay.ep):
        raise ConfigError(f"layout: ep={lay.ep} needs an MoE model whose experts ({spec.experts}) it divides, "
                          f"inside dp*cp*tp={lay.dp * lay.cp * lay.tp}")
    if lay.precision == "fp4" and lay.fp8_recipe != "nvfp4":
        raise ConfigError("layout: fp4 training needs the nvfp4 recipe")
    per_dp = global_batch / lay.dp
    if global_batch % lay.dp or per_dp % lay.micro_batch:
        raise ConfigError(f"layout: global batch {global_batch} is not divisible by dp*micro_batch="
                          f"{lay.dp}*{lay.micro_batch}")
    m = int(per_dp // lay.micro_batch)
    if lay.schedule in LOOPED and m % lay.pp:
        raise ConfigError(f"layout: the {lay.schedule} schedule needs micro-batches ({m}) divisible by pp={lay.pp}")
    return m
