"""Training frameworks as documented behaviour: what each overlaps, in which dtype it reduces
gradients, how it buckets, whether its kernels are fused, how its allocator holds memory.

Nothing here is fitted; every value is read from the framework's code or docs (commits of the
copies read, file:line):

- Megatron-LM / Megatron-Core / NeMo (NVIDIA/Megatron-LM d98e8a64dd): gradient and parameter
  overlap are off unless asked (megatron/core/distributed/distributed_data_parallel_config.py:15-29,
  `overlap_grad_reduce`, `overlap_param_gather` default False; --overlap-grad-reduce,
  --overlap-param-gather in megatron/training/arguments.py:3121,3148); bucket size
  max(40M, 1M x dp) parameters (megatron/core/distributed/distributed_data_parallel.py:134);
  bf16 training accumulates and reduces gradients in fp32 unless --grad-reduce-in-bf16
  (arguments.py:1204-1216); fused bias-GeLU / bias-dropout-add / LayerNorm kernels; the loss is the
  unfused fp32 vocab-parallel cross-entropy (52 B per logit, costmodel).
  Megatron-LM before Core (2021-22, "DDP-impl=local"): gradient all-reduce after backward.
- DeepSpeed ZeRO (deepspeedai/DeepSpeed edaa72212, deepspeed/runtime/zero/config.py):
  reduce_bucket_size 5e8 elements (:113), allgather_bucket_size 5e8 (:132), overlap_comm defaults
  to True only for stage 3 (:138, :383-386), stage-3 prefetch_bucket_size 5e7 parameters (:215),
  max_live_parameters 1e9 (:238). Stages 1/2 therefore reduce after backward unless the config
  says overlap_comm; stage 3 gathers each module's parameters in forward and again in backward,
  every micro-batch, through hooks (host work per module, not fused into a few large collectives).
- PyTorch DDP (torch 2.13 torch/nn/parallel/distributed.py:74-75): 25 MiB buckets (1 MiB first),
  reduced under backward, in the gradients' dtype.
- PyTorch FSDP1 (torch/distributed/fsdp/fully_sharded_data_parallel.py:404,410,411):
  backward_prefetch BACKWARD_PRE, forward_prefetch False, limit_all_gathers True (at most two
  units' gathers in flight); Composer / llm-foundry wrap one unit per block and use
  MixedPrecision DEFAULT (bf16 params, fp32 reduce) or PURE (bf16 reduce)
  (mosaicml/llm-foundry scripts/train/benchmarking/submit_benchmarks.py mod_parameters).
- PyTorch FSDP2 / torchtitan (pytorch/torchtitan b5bcd76c6 torchtitan/config/configs.py:94,102:
  bf16 parameters, fp32 gradient reduce-scatter; :145 reshard after forward by default);
  float8 all-gather of weights with torchao tensorwise (pytorch/ao 36027d82d
  torchao/float8/config.py:225 enable_fsdp_float8_all_gather); torch.compile fuses elementwise ops.
- torchtune single device: weights, gradients and AdamW states in bf16, no fp32 master copy.
- Activation checkpointing in PyTorch (FSDP1/Composer with activation_checkpointing_reentrant=False as
  llm-foundry's submit_benchmarks.py sets it; torchtitan's and torchtune's checkpoint_wrapper) is the
  non-reentrant torch.utils.checkpoint, which stops recomputing once every saved tensor is rebuilt
  ("early stop", default since pytorch/pytorch#96866, torch 2.1; torch/utils/checkpoint.py:402-404 in
  torch 2.13): the block's last GEMM is not re-run. XLA removes recomputation whose result backward does
  not use. Megatron's and DeepSpeed's checkpointing re-runs the whole block (reentrant style).
- JAX / MaxText (AI-Hypercomputer/maxtext MaxText/configs/v5p/*.sh): FSDP over ICI and data
  parallel over DCN; XLA's latency-hiding scheduler and async collective fusion overlap the weight
  gathers and gradient reduce-scatters with compute, and async collective fusion the TP
  collectives (LIBTPU_INIT_ARGS --xla_tpu_enable_async_collective_fusion*, collective matmul);
  XLA fuses elementwise producers and consumers into the dots and the loss;
  buffers are assigned statically (no caching-allocator slack).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stride.config.errors import ConfigError, suggest


@dataclass(frozen=True)
class Framework:
    name: str
    label: str
    grad_overlap: bool  # gradient reduction hidden under backward (bucketed)
    param_overlap: bool  # ZeRO-1/2 parameter all-gather / ZeRO-3 gathers hidden under compute
    grad_reduce_fp32: bool  # bf16 training reduces gradients in fp32 (4 B per element on the wire)
    bucket_params: float  # parameters per gradient bucket: the last one's reduction is exposed
    fused_elementwise: bool  # norms, activation, residual fused (Megatron/TE, XLA, torch.compile)
    ce_bytes_per_logit: float  # traffic of the loss per vocabulary logit (fp32 softmax + backward)
    master_weights: bool  # fp32 master copy + fp32 Adam (16 B/param with bf16 weights); else pure bf16
    zero3_module_hooks: bool  # ZeRO-3 fetches parameters module by module through hooks
    allocator_slack: float  # reserved / allocated bytes of the caching allocator (fragmentation)
    tp_overlap: bool = False  # TP collectives hidden under GEMMs by default
    xla_fusion: bool = False  # XLA fuses elementwise producers/consumers into the dots
    # full recompute stops once every tensor backward needs is rebuilt: the block's last GEMM (MLP down /
    # expert out) and what follows it are not re-run (torch non-reentrant checkpoint's early stop; XLA drops
    # the recomputation backward does not use); Megatron/DeepSpeed recompute the whole block
    ac_early_stop: bool = False


# Unfused fp32 cross-entropy over bf16 logits (Megatron's vocab_parallel_cross_entropy, PyTorch
# autocast): cast 2r+4w, max 4r, subtract 4r+4w, exp 4r+4w, sum 4r, divide 4r+4w, backward scale
# 4r+4w, cast of the gradient 4r+2w = 52 B per logit. A fused/chunked loss reads the bf16 logits
# and writes their bf16 gradient: 4 B. PyTorch's F.cross_entropy under autocast: cast 6, log_softmax
# 8, nll 4, backward log_softmax 12, cast 6 = 36 B.
CE_MEGATRON, CE_TORCH, CE_FUSED = 52.0, 36.0, 4.0

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("megatron", "Megatron-Core / NeMo", True, True, True, 40e6, True, CE_MEGATRON, True, False, 1.05),
    Framework("megatron-legacy", "Megatron-LM (2021-22, DDP-impl=local)", False, False, True, 0.0, True,
              CE_MEGATRON, True, False, 1.05),
    Framework("deepspeed", "DeepSpeed ZeRO (+ Megatron-DeepSpeed)", False, False, True, 5e8, True, CE_MEGATRON,
              True, True, 1.10),
    Framework("ddp", "PyTorch DDP (eager)", True, True, False, 25 * 2**20 / 4, False, CE_TORCH, True, False, 1.10),
    Framework("fsdp1", "PyTorch FSDP1 (Composer / llm-foundry / accelerate)", True, True, True, 0.0, False, CE_TORCH,
              True, False, 1.10, ac_early_stop=True),
    Framework("fsdp2", "PyTorch FSDP2 / torchtitan", True, True, True, 0.0, False, CE_TORCH, True, False, 1.05,
              ac_early_stop=True),
    Framework("torchtune", "torchtune (single device, pure bf16)", True, True, False, 0.0, False, CE_TORCH, False,
              False, 1.0, ac_early_stop=True),
    Framework("maxtext", "JAX / MaxText (XLA)", True, True, True, 0.0, True, CE_FUSED, True, False, 1.0,
              tp_overlap=True, xla_fusion=True, ac_early_stop=True),
)}
DEFAULT = "megatron"

# (pattern on the lower-cased framework / source text, profile); first match wins
_TEXT = [
    (r"ddp-impl=local", "megatron-legacy"),
    (r"deepspeed|zero[- ]?[123]\b|zero stage", "deepspeed"),
    (r"maxtext|\bjax\b|\bxla\b|\bpax\b|praxis|\bt5x\b|levanter", "maxtext"),
    (r"torchtune", "torchtune"),
    (r"torchtitan|fsdp2|fully_shard", "fsdp2"),
    (r"composer|llm-foundry|foundry|fsdp1|\bfsdp\b|accelerate", "fsdp1"),
    (r"megatron|nemo|\bmcore|tp[_ ]comm[_ ]overlap|use[_ ]dist[_ ]optimizer", "megatron"),
    (r"\bddp\b|pytorch|torch\b|picotron", "ddp"),
]


def get_framework(name: str) -> Framework:
    key = name.strip().lower()
    if key in FRAMEWORKS:
        return FRAMEWORKS[key]
    found = framework_from_text(key)
    if found is None:
        raise ConfigError(f"unknown framework `{name}`{suggest(key, list(FRAMEWORKS))}; known: {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[found]


def framework_from_text(text: str) -> str | None:
    """The profile a free-text framework description selects, or None."""
    low = (text or "").lower()
    return next((name for pat, name in _TEXT if re.search(pat, low)), None)


def compiled(text: str) -> bool:
    """torch.compile / XLA fusion named in the text, and not negated ("torch.compile: no", "compile=False",
    "without torch.compile")."""
    low = (text or "").lower()
    low = re.sub(r"(torch\.compile|\bcompiled?)\s*[:=]?\s*(no|false|off|disabled|none|0)\b|"
                 r"\b(no|without|not|disabled)\W{0,3}(torch\.)?compiled?\b", " ", low)
    # the loss alone compiled (torchtitan's compile.components = ['loss']): the model runs eager (fused_loss reads it)
    low = re.sub(r"(?:torch\.)?compiled?\b[^;.]{0,20}?\bloss[ -]only\b|"
                 r"(?:compile\.)?components\W{0,4}\[\W{0,2}loss\W{0,2}\]", " ", low)
    # A graph captured but run op by op fuses nothing: torch.compile's `aot_eager` backend (no Inductor code
    # generation: SimpleFSDP's default, torchtitan graph_trainer's default backend at fca8ab7be, March 2026) and
    # graph_trainer's aot_fx_trace pass pipeline, whose `inductor_compilation` defaults to "regional": Inductor
    # compiles only the regions tagged for it (FlexAttention; RMSNorm under numerics_changing_optim) "while leaving
    # the rest interpreted" (experiments/graph_trainer/configs.py and passes.py, 27aa49077, June 2026). Only
    # `inductor_compilation full` fuses the model's elementwise ops there. Not HF Accelerate's or torchtitan's
    # "regional compilation" (torch.compile of each block, through Inductor).
    if not re.search(r"full[ _-]?inductor|inductor[ _-]?compilation\W{0,3}full", low) and \
            re.search(r"aot_eager|graph[ _-]?trainer|aot_fx_trace|regional[ _-]?inductor|"
                      r"inductor[ _-]?compilation\W{0,3}regional", low):
        return False
    # PyTorch/XLA (torch-neuronx on Trainium) traces the model into a graph its compiler fuses: compiled as well
    return bool(re.search(r"torch\.compile|\bcompile[d]?\b|inductor|neuronx|torch[-_ ]?xla|pytorch/xla", low))


# Liger named but off, or named for what it is not: "Liger-Kernel OFF (stock HF modeling code)", "use_liger_kernel
# false", "the foak (non-Liger) run", "without Liger"
# (the switch word right after the name, so "Liger kernel, no activation checkpointing" keeps its Liger)
_LIGER_OFF = (r"liger(?:[ _-]?kernels?)?\s*[:=]?\s*(?:off|false|disabled|none)\b|"
              r"\b(?:non|no|without|not)\W{1,3}liger(?:[ _-]?kernels?)?")
# Liger named with the kernels it patched, none of them its loss: Axolotl's "Liger plugin (glu activation, rms_norm,
# layer_norm)" runs the model's own cross-entropy (a list of kernels: a norm, rotary or GLU named, no loss)
_LIGER_NO_LOSS = (r"liger[^()]{0,25}\((?=[^()]*(?:norm|rope|glu))(?:(?!cross|loss|\bce\b|flce)[^()])*\)")
# ... and with a list whose loss is Liger's plain cross-entropy ("Liger (rms_norm, rope, CrossEntropy)"): the model's
# logits are still held, the loss is fused over them (fused_loss, not linear_loss)
_LIGER_NO_LINEAR = r"liger[^()]{0,25}\((?=[^()]*(?:norm|rope|glu))(?:(?!linear|flce)[^()])*\)"


def _loss_text(text: str) -> str:
    low = re.sub(_LIGER_OFF, " ", (text or "").lower())
    return re.sub(_LIGER_NO_LOSS, " ", low)


def fused_loss(text: str) -> bool:
    """A loss that never materialises fp32 logits: chunked / fused / compiled with the model
    (torchtune's `compile=True` compiles the model and the loss; Inductor fuses the upcast,
    log-softmax and its backward into a few passes over the bf16 logits)."""
    low = _loss_text(text)
    # llm.c's "fused classifier": one kernel for the softmax, the loss and its gradient over the bf16 logits
    return linear_loss(text) or bool(re.search(r"chunked[ _-]?(cross|ce|loss)|fused[ _-]?(cross|ce|loss|classifier)|"
                                               r"cross[- ]entropy[- ]loss[- ]fusion|liger|compile.{0,30}\bloss\b",
                                               low))


def linear_loss(text: str) -> bool:
    """The LM head and the loss in one chunked op, so the logits are never held whole, only one chunk's: Liger's
    fused linear cross-entropy (`LigerFusedLinearCrossEntropyLoss`; its Hugging Face patches, `AutoLigerKernelFor
    CausalLM` and the Trainer's `use_liger_kernel`, turn it on by default), Apple's Cut Cross-Entropy, prime-rl's
    fused LM head. A chunked loss over logits the model returns (torchtune's CEWithChunkedOutputLoss, LitGPT's
    lm_head_chunk_size) keeps the bf16 logits: `fused_loss` only."""
    return bool(re.search(r"fused[ _-]?linear[ _-]?cross|linear[ _-]?cross[ _-]?entropy|\bflce\b|"
                          r"fused[ _-]?lm[ _-]?head|cut[ _-]?cross[ _-]?entropy|liger",
                          re.sub(_LIGER_NO_LINEAR, " ", _loss_text(text))))
