"""Small rules that read the free-text fields of a published-results row.

Each returns the model's value and, where it assumed something, a note. Text the rules cannot
read raises ValueError naming the field and the text (the row is then refused with that reason).
"""

from __future__ import annotations

import math
import re

from stride.perfmodel.layout import V_SHAPE
from stride.perfmodel.precision import recipe_from_text


def clean(text: str | None) -> str:
    """Lower-case text without parenthesised asides ("16-bit (inferred: ...)")."""
    return re.sub(r"\(.*?\)", "", text or "").strip().lower()


def number(text: str | None) -> float | None:
    """The first finite number in a cell ("1,024", "4.2k", "~900"), or None."""
    raw = (text or "").strip().lower().replace(",", "")
    m = re.search(r"[-+]?\d*\.?\d+(?:e[-+]?\d+)?", raw)
    if not m:
        return None
    try:
        v = float(m.group(0))
    except ValueError:
        return None
    if raw[m.end():m.end() + 1] == "k":
        v *= 1e3
    return v if math.isfinite(v) else None


def count(text: str | None, binary_k: bool = False) -> float | None:
    """A count as sources write it: "1,024", "4k" (x1024 where `binary_k`: sequence lengths are powers of
    two, "8k context" is 8192), "8 nodes x 8 GPUs" / "16x8" (the product), else `number`."""
    raw = (text or "").strip().lower().replace(",", "")
    m = re.search(r"(\d+)\s*(?:nodes?|hosts?|vms?|servers?)?\s*[x×*]\s*(\d+)\b", raw)
    if m:
        return float(int(m.group(1)) * int(m.group(2)))
    m = re.search(r"(\d+(?:\.\d+)?)\s*k\b", raw)
    if m and binary_k and float(m.group(1)).is_integer():
        return float(m.group(1)) * 1024
    return number(text)


def tokens_to_sequences(text: str | None, seq: int) -> int | None:
    """A global batch written in tokens ("4M tokens", "2,097,152 tokens") as sequences of `seq`; the
    decimal or the binary reading of k/M, whichever is a whole number of sequences; None if not tokens."""
    raw = (text or "").strip().lower().replace(",", "")
    m = re.search(r"(\d+(?:\.\d+)?)\s*([km]?)\s*(?:tokens?|tok)\b", raw)
    if not m or seq <= 0:
        return None
    v, unit = float(m.group(1)), m.group(2)
    for mult in ({"k": (1e3, 1024), "m": (1e6, 2**20)}.get(unit, (1,))):
        n = v * mult / seq
        if abs(n - round(n)) < 1e-6 and n >= 1:
            return int(round(n))
    return None


# offloading said to be off: "no CPU offloading", "cpu_offloading_num_layers=None", "offload_optimizer: false"; or
# not said at all ("offload: not stated"): a run is taken as set up the usual way, on the device
_NO_OFFLOAD = (r"\b(no|without|disabled?|not)\W{1,3}((cpu|activation|optimizer|param(eter)?s?)\W{1,3}){0,2}"
               r"offload\w*|offload\w*(?:\W{1,3}[a-z_]+\b){0,3}?\W{0,3}\b(false|off|none|no|disabled|0)\b|"
               r"offload\w*\W{0,3}(not (stated|given|known|said)|unstated|unknown|n/a|unclear)")


def _offloads_to_host(text: str | None) -> bool:
    """The text offloads to the host, not a MaxText remat policy's "offloaded" (qkv_proj_offloaded: recompute)."""
    return offloads(text) and not re.search(r"remat_policy|_offloaded", (text or "").lower())


def offloads(text: str | None) -> bool:
    """The text says something is offloaded to the host (not only that offloading is off)."""
    low = re.sub(_NO_OFFLOAD, " ", (text or "").lower().replace("-", "_"))
    return bool(re.search(r"offload", low))


# the host offload a run's zero/FSDP words name: FSDP's CPU offload holds the sharded parameters, their gradients and
# the optimizer on the host; DeepSpeed names each (offload_optimizer, offload_param; "ZeRO-Offload" = the optimizer)
_OFFLOAD_PARAMS = r"offload[ _]?param|param\w*\W{1,3}(cpu\W{1,3})?offload|fsdp.{0,80}(cpu[ _]?offload|offload)"
_OFFLOAD_OPTIMIZER = r"offload[ _]?optim|optim\w*\W{1,3}(cpu\W{1,3})?offload|zero[ _]?offload|cpu[ _]?optim|\boffload\b"


def offload_switches(zero_text: str | None, recompute_text: str | None) -> tuple[bool, bool, int]:
    """(optimizer, parameters, activation blocks; -1 = every block) the row's words put on the host. Each clause
    (split at , ; and parentheses) is read alone, so "offload_optimizer: cpu, offload_param: none" offloads the
    optimizer only and a "pin_memory=false" beside an offload cancels nothing (review of 2026-12-06, M3)."""
    z = (zero_text or "").lower().replace("-", "_").replace("w/o", "without")
    fsdp = "fsdp" in z
    optimizer = params = False
    for clause in (c for c in re.split(r"[,;()]", z) if offloads(c)):
        p = bool(re.search(_OFFLOAD_PARAMS, clause)) or (fsdp and bool(re.search(r"cpu[ _]?offload", clause)))
        params |= p
        optimizer |= p and fsdp or bool(re.search(_OFFLOAD_OPTIMIZER, clause))
    r = (recompute_text or "").lower().replace("-", "_")
    blocks = 0
    if _offloads_to_host(r):
        m = re.search(r"offload\w*?num_?layers\W{0,3}(\d+)|(\d+)\s*(?:layers?|blocks?)\W{0,3}offload|"
                      r"offload\w*\s+(?:of\s+)?(\d+)\s*(?:layers?|blocks?)", r)
        blocks = int(next(g for g in m.groups() if g)) if m else -1
    return optimizer, params, blocks


def blank(text: str | None) -> bool:
    return clean(text) in ("", "n/a", "na", "-", "none", "not stated", "unknown", "?", "nan")


def unstated(text: str | None) -> bool:
    """The row does not say (unlike `blank`, "none" is a statement: none of it)."""
    return clean(text) in ("", "n/a", "na", "-", "not stated", "unknown", "?", "nan")


_FORMATS = r"\b(?:bf16|bfloat16|fp16|float16|fp8|float8|tf32|half|amp|mixed)\b"
# "no --fp16", "without fp8", "w/o fp8", "non-fp8", "no fp16/bf16"; "fp8: false", "fp16 off" where the clause ends
# there ("bf16: no fp32 master weights" and "fp16: no loss scaling" say something else of a format that ran)
_NEGATED_FORMAT = (r"(?:\b(?:no|not|without|non)|w/o)(?:\s+|-)(?:--)?" + _FORMATS
                   + r"(?:\s*(?:/|,|\bor\b|\band\b|\bnor\b)\s*(?:--)?" + _FORMATS + r")*|"
                   r"(?:--)?" + _FORMATS + r"\s*[:=]?\s*(?:false|off|no|none|disabled|0(?![.\d]))"
                   r"(?=\s*(?:[,;)\]}]|$))")


def precision(text: str) -> tuple[str, str, list[str]]:
    """(precision, fp8 recipe, notes) from "bf16 (inferred...)", "amp_fp8 (TE delayed)", "MXFP8"..."""
    # a format the text says was not used names nothing ("TF32 ...; no --fp16", "fp8: false", "without bf16")
    low = re.sub(_NEGATED_FORMAT, " ", (text or "").lower())
    prec, rec = recipe_from_text(low)
    if prec:
        return prec, rec, []
    if re.search(r"bf16|bfloat16", low):
        return "bf16", "delayed", []
    if re.search(r"fp16|16-bit|float16|half", low):
        return "fp16", "delayed", []
    if re.search(r"tf32|tensorfloat", low):  # fp32 storage, GEMMs on the TF32 tensor cores (7-8x fp32's peak)
        return "tf32", "delayed", []
    if re.search(r"fp32|float32|full precision", low):
        return "fp32", "delayed", []
    if re.search(r"\bmixed\b|\bamp\b|automatic mixed", low):  # 16-bit; bf16 and fp16 share the peak
        return "bf16", "delayed", ["precision 'mixed' without a dtype: bf16 assumed (fp16 runs at the same peak)"]
    if blank(text):
        return "bf16", "delayed", ["precision not stated: bf16 assumed"]
    if re.search(r"\bint\d|\bfp6\b|\bq[0-9]\b|quantiz", low):  # a format the model has no peak for
        raise ValueError(f"precision {text!r} is not understood (bf16, fp16, fp8 recipes, nvfp4, fp32)")
    # words that name no number format at all (a framework description in the precision column): as if blank
    return "bf16", "delayed", [f"precision {text.strip()[:60]!r} names no number format: bf16 assumed"]


def zero_stage(text: str) -> tuple[int, list[str]]:
    """ZeRO stage: distributed optimizer = 1, SHARD_GRAD_OP = 2, FSDP / FULL_SHARD / ZeRO-3 = 3."""
    t = (text or "").lower().replace("_", " ").replace("-", " ")
    if re.search(r"zero infinity|\bnvme\b", t):
        raise ValueError(f"zero_or_fsdp {text!r}: NVMe offload (ZeRO-Infinity) is not modelled (the drives' "
                         "bandwidth, not the host link, sets the step); CPU offload is")
    t = re.sub(r"\s*[=:]\s*(?=\d)", " ", t)  # ZERO_STAGE=0, zero_stage: 3
    if t.strip() in ("0", "1", "2", "3"):  # the column holds the stage alone
        return int(t.strip()), []
    if t.strip() in ("false", "off", "disabled"):
        return 0, []
    # Megatron-Core's own FSDP names what it shards (data_parallel_sharding_strategy)
    for word, stage in (("optim grads params", 3), ("optim grads", 2), ("optim", 1), ("no shard", 0)):
        if re.search(r"sharding strategy\W{0,3}" + word + r"\b", t):
            return stage, []
    # FSDP that keeps the gathered weights from forward to backward (FSDP2 reshard_after_forward=False, FSDP1
    # SHARD_GRAD_OP, Llama 3's "model shards not resharded after forward") gathers once and shards gradients and
    # optimizer states: ZeRO-2's traffic and weights
    if re.search(r"reshard after forward\W{0,3}(false|0|no|never)\b|(not|no|never|without) resharde?d? after forward"
                 r"|do not reshard", t):
        return 2, []
    # a negated or zero-sized FSDP ("FSDP 0", "FSDP: off", "no FSDP", NeMo tables' FSDP column of 0) is not FSDP
    t = re.sub(r"\b(fsdp|hsdp)(\s+[01]|\s*[:=]?\s*(false|off|no|none|disabled))\b|"
               r"\b(no|without|disabled)\s+(fsdp|hsdp)\b", " ", t)
    if re.search(r"zero\s*(stage\s*)?3|full shard|fully shard|\bfsdp\b(?!.*shard grad op)|fsdp2|ici fsdp|\bhsdp\b|"
                 r"hybrid shard(?! zero2)|\bdp shard|\bfsdp1\b", t):
        return 3, []
    if re.search(r"zero\s*(stage\s*)?2|shard grad op|hybrid shard zero2", t):
        return 2, []
    if re.search(r"zero\s*(stage\s*)?1|distributed optimizer|dist(ributed)? opt", t):
        return 1, []
    if re.search(r"zero\s*(stage\s*)?0|\bnone\b|\bno\b|^\s*$|n/a|\bddp\b|stage 0|zero_stage=0", t) or blank(text):
        return 0, []
    # ZeRO named without its stage ("ZeRO (stage not stated)"; a stated stage 0-3 returned above): the optimizer
    # states at least are sharded; stage 1, the smallest claim, is assumed and said
    if re.search(r"\bzero\b", t):
        return 1, ["ZeRO without its stage: stage 1 (optimizer states sharded) assumed"]
    # an optimizer named with no word of sharding ("fused_adam", "AdamW"): its states are not sharded
    if re.search(r"adam|\bsgd\b|\blamb\b|\blion\b|adafactor|\bmuon\b", t) and not re.search(r"shard|partition", t):
        return 0, []
    raise ValueError(f"zero_or_fsdp {text!r} is not understood (none, ZeRO-1/2/3, distributed optimizer, FSDP)")


def shard_group(text: str, dp: int, per_node: int) -> tuple[int, list[str]]:
    """Data-parallel ranks the ZeRO/FSDP states are sharded over when the text says the sharding is
    hybrid (0: all of dp): MaxText "ici_fsdp_parallelism=K, dcn_data_parallelism=R" (FSDP inside a slice,
    replicas across), torchtitan "dp_shard=K" / "data_parallel_shard_degree=K" /
    "data_parallel_replicate_degree=R", PyTorch "HYBRID_SHARD" / "HSDP" (FSDP inside a node)."""
    low = (text or "").lower().replace("-", "_")
    num = r"\s*[=:]?\s*(\d+)"
    m = re.search(r"(?:dcn_data_parallelism|dp_replicate|data_parallel_replicate_degree|replicas?)" + num, low)
    if m and int(m.group(1)) > 1 and dp % int(m.group(1)) == 0:
        return dp // int(m.group(1)), []
    m = re.search(r"(?:dp_shard|data_parallel_shard_degree|shard[_ ]group(?:[_ ]size)?)" + num, low)
    if m and 1 < int(m.group(1)) < dp and dp % int(m.group(1)) == 0:
        return int(m.group(1)), []
    m = re.search(r"\bhsdp\b\D{0,12}(\d+)\s*[x×]\s*(\d+)", low)  # PyTorch's mesh order: (replicate, shard)
    if m and int(m.group(1)) * int(m.group(2)) == dp:
        return int(m.group(2)), []
    if re.search(r"hybrid[_ ]?shard|\bhsdp\b", low) and per_node and 1 < per_node < dp and dp % per_node == 0:
        return per_node, [f"hybrid sharding: shard group = the {per_node} devices of a node (assumed)"]
    return 0, []


_RECOMPUTE_WORDS = [
    (r"qkv_proj_offloaded", "full-except-qkv"),
    (r"save_dot_except_mlpwi", "mlp-in"),
    (r"remat_policy\s*=\s*custom", "mlp"),
    # MaxText `minimal` / `minimal_flash` (MaxText/layers/models.py:216-241 at efb6d9e4a) save only the dots
    # without batch dims (the projections) and, for minimal_flash, the attention output: the attention core
    # (batched dots, or the flash kernel whose softmax statistics are not saved) is recomputed
    (r"minimal|no_batch_dims", "selective"),
    (r"save_dot|dots_saveable|checkpoint_dots|nothing_saveable_except", "none"),
    # a fused attention kernel's own backward recompute (Habana --use-fused-sdpa-with-recompute, FlashAttention's
    # score recompute) is how flash attention runs, not activation checkpointing
    (r"sdpa[-_ ]with[-_ ]recompute|flash[-_ ]?attention[-_ ]recompute", "none"),
    # negations before the words they negate: "activation checkpointing disabled", "no AC", "AC: none"; config
    # values as launch scripts print them: NeMo `activations_checkpoint_granularity: null`, `ACT_CKPT_GRANULARITY=null`,
    # Megatron `recompute_granularity: None`, MLPerf's `ACG=` (granularity) unset
    (r"(checkpoint\w*|ckpt\w*|recompute\w*|remat\w*|\bac\b|\bacg\b)\W{0,3}"
     r"(disabled|off|false|none|no|null|not set|unset)\b|"
     r"\b(no|without|disabled?)\W{0,3}(activation |gradient )?(checkpoint|recompute|remat|ac\b)", "none"),
    # Megatron's --recompute-modules naming only norms and activation functions (layernorm, moe_act): elementwise
    # kernels re-run, no GEMM: costed as no recompute (published.py notes it)
    (r"^\W*(--recompute-modules\W*)?((layer_?)?norm|(moe_)?act(ivation)?)"
     r"(\W+((layer_?)?norm|(moe_)?act(ivation)?))*\W*$", "none"),
    # checkpointing named by module: OLMo-core's `selected_modules: blocks.*.feed_forward` re-runs the FFN; the
    # DeepSeek-V3 report's "recomputation of all RMSNorm operations and MLA up-projections" is Megatron's selective
    # module list (norms, mla_up_proj) in words
    (r"selected_modules\W(?!.*attention).*\b(feed_forward|ffn|mlp)\b", "mlp"),
    (r"selected_modules\W.*attention.*\b(feed_forward|ffn|mlp)\b|selected_modules\W.*\b(feed_forward|ffn|mlp)\b"
     r".*attention", "full"),
    (r"selected_modules\W.*attention", "selective"),
    (r"^(?!.*\b(full|every layer|all layers|whole)\b).*recomputation of\b.*\b(norms?|rmsnorm|layernorm|"
     r"up[-_ ]?proj\w*)\b", "selective"),
    # Megatron's --recompute-activations is selective (arguments.py: "recompute activation to allow for training
    # with larger models ... selective"); torchtitan's SAC is selective activation checkpointing
    (r"selective|attention core|core attention|\bsac\b|recompute[-_ ]activations\b", "selective"),
    (r"^\s*(none|no|off|false|disabled|0)\b|\bno (recompute|checkpoint|remat)|without", "none"),
    (r"\bfull\b|every layer|uniform|rematerializ|\bremat|hfu\s*>\s*mfu|\btrue\b|\byes\b|activation[ _-]checkpoint"
     r"|gradient[ _-]checkpoint|checkpoint[-_ ]activations|recompute|\bon\b|nothing_saveable|\bac\b", "full"),
    (r"\bnone\b|\bno\b|\boff\b|false|disabled", "none"),
]


_OP_SAC = r"per[-_ ]op\b|selective[-_ ]op\b|selective_ac_option\W{0,3}op\b|\bop\W{0,3}sac\b"


def recompute_every(text: str) -> int:
    """N where a block in every N is fully recomputed: torchtitan's per-layer SAC ("selective layer",
    `selective_ac_option = "2"`, its default: every second block); 0 where the text does not say so."""
    low = (text or "").lower()
    m = re.search(r"selective_ac_option\W{0,5}(\d+)\b", low)
    if m:
        return int(m.group(1))
    if re.search(r"selective[-_ ]layer|layer[-_ ]sac|per[-_ ]layer sac", low):
        m = re.search(r"every\s+(\d+)(?:nd|rd|th)?\s+(?:layers?|blocks?)", low)
        return int(m.group(1)) if m else 2
    return 0


# words that make a clause of the recompute cell speak of recompute (or state a mode) at all
_NAMES_RECOMPUTE = (r"checkpoint|ckpt|recomput|remat|selected_modules|\bac\b|\bacg\b|\bsac\b|selective|saveable|"
                    r"save_dot|policy|offload|minimal|no_batch_dims|every layer|uniform|"
                    # a mode alone, or "full" not naming another thing ("full CUDA graphs", "FSDP full shard")
                    r"^\W*(none|no|off|false|disabled|0|full|on|true|yes|enabled)\W*(\(|$)")


_OFFLOADED_CHECKPOINTS = (r"(?:checkpoint\w*|recomput\w*)\W{1,3}(?:with\W{1,3})?(?:cpu\W{1,3}|host\W{1,3})?offload|"
                          r"offload\w*\W{1,3}(?:gradient|activation)[ _]checkpoint|"
                          r"gradient_checkpointing\W{1,3}offload")


def recompute(text: str) -> str | None:
    """Recompute mode from words, or None where the row does not say (chosen later: cheapest that fits)."""
    if unstated(text):
        return None
    if _offloads_to_host(text):
        # checkpointing whose checkpoints go to the host (transformers / Axolotl / Unsloth `gradient_checkpointing:
        # offload`): every block recomputed, its saved input offloaded (offload_switches counts the offload)
        if re.search(_OFFLOADED_CHECKPOINTS, (text or "").lower()):
            return "full"
        # the offload clauses are offload_switches'; the rest says the recompute mode, or nothing
        text = re.sub(r"[^;,()]*offload\w*[^;,()]*(\([^)]*\))?", " ", text or "")
        if unstated(text.strip(" ;,()")):
            return None
    # a block count of 0 checkpoints no block, whatever the granularity says (NeMo's GPT-3 5B config of 2022:
    # "activations_checkpoint_granularity: full, method: block, num_layers: 0", blind round 32, was read as full)
    if re.search(r"(?<!offloading_)num[-_ ]layers\W{0,3}0(?![.\d])|"
                 r"\bno (?:layers?|blocks?) (?:is |are )?(?:recomputed|checkpointed)", (text or "").lower()):
        return "none"
    # torchtitan's per-op SAC (selective_ac_option "op") re-runs every other matmul, unlike Megatron's selective
    if re.search(_OP_SAC, (text or "").lower()):
        return "op-sac"
    if recompute_every(text):
        return "full"
    # clauses that disagree: one mechanism said on, another said off ("HF gradient checkpointing
    # (--gradient_checkpointing); fsdp_activation_checkpointing false") -> the one that is on. A config's granularity
    # key decides alone ("recompute_granularity None; recompute_method uniform": the method is unused)
    clauses = _top_level_clauses(text or "")
    # a module list is one statement across its commas ("selected_modules: blocks.*.attention, blocks.*.feed_forward")
    if len(clauses) > 1 and not re.search(r"granularity|\bacg\b|selected_modules", (text or "").lower()):
        # a clause about something else ("CUDA graphs on", NeMo's GB200 rows) says nothing of recompute: its
        # bare "on" is not a mode
        modes = {_recompute_words(c) for c in clauses if re.search(_NAMES_RECOMPUTE, c.lower())} - {None}
        if len(modes - {"none"}) == 1:
            return (modes - {"none"}).pop()
    mode = _recompute_words(text or "")
    if mode is None:
        raise ValueError(f"recompute {text!r} is not understood (none, selective, full, rematerialization words)")
    return mode


def _recompute_words(text: str) -> str | None:
    for candidate in (clean(text), text.lower()):
        for pat, mode in _RECOMPUTE_WORDS:
            if candidate and re.search(pat, candidate):
                return mode
    return None


def _top_level_clauses(text: str) -> list[str]:
    """`text` split at the semicolons and commas outside parentheses, blank parts dropped."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch in ";," and depth <= 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in (x.strip() for x in parts) if p]


def recompute_layers(text: str) -> int:
    """Blocks per pipeline stage that recompute when the text limits it (Megatron/NeMo `--recompute-method block
    --recompute-num-layers N`, `activations_checkpoint_method: block`, `ACM=block ACL=N`); 0: every block."""
    low = (text or "").lower().replace("-", "_")
    if not re.search(r"(?:method|\bacm)\W{0,3}block\b|\bblock\W{1,3}\d+\s*layers?\b", low):
        return 0
    m = re.search(r"(?:recompute_num_layers|activations_checkpoint_num_layers|num_layers|\bacl)\W{0,3}(\d+)", low) \
        or re.search(r"\bblock\W{1,3}(\d+)\s*layers?\b", low)  # "full, block, 5 layers"
    return int(m.group(1)) if m else 0


def elementwise_recompute(text: str) -> bool:
    """True where the recompute text names only norms and activation functions (Megatron --recompute-modules
    layernorm moe_act): those kernels are elementwise, re-running them moves the step by a few per cent."""
    return (blank(text) is False and recompute(text) == "none" and bool(re.search(r"norm|\bact", (text or "").lower()))
            and not re.search(r"null|none|false|disabled|\bno\b|off", (text or "").lower()))


def cp_channels(text: str) -> int:
    """NCCL channels the context-parallel communicator may use, where the text caps them: a per-communicator
    `cp: max_ctas: N` (Megatron-Core's nccl_communicator_config_path YAML, as MLPerf's NeMo configs set it),
    else a global NCCL_MAX_CTAS / NCCL_MAX_NCHANNELS; 0 where nothing caps them."""
    low = (text or "").lower()
    per_comm = r"(?<![\w-])cp\W{1,4}(?:(?:cga_cluster_size|min_ctas)\W{1,3}\d+\W{1,4}){0,2}max_ctas\W{1,3}(\d+)"
    m = re.search(per_comm, low) or re.search(r"nccl_max_(?:ctas|nchannels)\s*=\s*(\d+)", low)
    return int(m.group(1)) if m else 0


def cp_unbalanced(text: str) -> bool:
    """Context parallelism said to run without load balancing (Layout.cp_unbalanced): "no load balancing" beside
    context parallelism, MaxText's `context_parallel_load_balance` false, torchtitan's `load_balance=False`. Not a
    MoE router's balancing ("no load balancing loss", "aux-loss-free load balancing")."""
    low = (text or "").lower()
    return bool(re.search(r"\b(?:no|without|disabled?)\s+(?:cp\s+|context[- ]parallel(?:ism)?\s+)?"
                          r"load[ _-]?balanc(?:e|ing)\b(?!\s*(?:loss|aux))|"
                          r"context_parallel_load_balance\W{0,3}(?:false|0)\b|"
                          r"\bload_balance\W{0,3}(?:false|0)\b", low))


def ulysses(framework: str, everything: str, cp: int) -> int:
    """DeepSpeed-Ulysses' all-to-all degree inside context parallelism `cp` (Layout.ulysses): a stated degree
    ("ulysses 4 x ring 2", USP's hybrid; "ulysses-degree 4"), else all of cp where the framework cell names Ulysses
    or all-to-all (head-parallel) attention and no ring, or anywhere Megatron-Core's `--cp-comm-type a2a`
    (a2a+p2p, the hierarchical form, needs its sizes: not read). 1 otherwise: ring or all-gather."""
    if cp <= 1:
        return 1
    low = framework.lower()
    m = (re.search(r"ulysses(?:[- _]degree)?\W{0,3}(\d+)\s*(?:x|\*|×)\s*ring", low)
         or re.search(r"ulysses[- _](?:degree|size)\W{0,3}(\d+)", low))
    if m:
        return int(m.group(1))
    if re.search(r"\bno\W+(?:deepspeed[- ])?ulysses", low):
        return 1
    named = re.search(r"ulysses|all[- ]to[- ]all[^,;]{0,20}head|head[- ]parallel attention", low)
    if named and not re.search(r"\bring\b", low):
        return cp
    if re.search(r"cp[-_ ]comm[-_ ]type\W{0,3}a2a(?!\s*\+)", everything):
        return cp
    return 1


def tp_overlap(text: str, default: bool) -> bool:
    """Whether TP collectives hide under GEMMs: said off ("TP_COMM_OVERLAP=False", as MLPerf v5.1's NVFP4 configs set
    it: "TP overlap not supported yet"), said on (TE userbuffers, async TP), else the framework's `default`."""
    low = text.lower()
    if re.search(r"(?:tp[- _]comm[- _]overlap|async[- _]tp)\W{0,3}(?:false|0|off|no|none|disabled)\b|"
                 r"\bno (?:async[- _]tp|tp[- _]comm[- _]overlap)", low):
        return False
    said_on = re.search(r"tp[- _]comm[- _]overlap|async[- _]tp|tp.{0,20}overlap|overlap.{0,20}\btp\b", low)
    return default or bool(said_on)


def flag(text: str | None) -> bool:
    """True/yes/on, or a word like "sequence parallel" / "SP" in the cell."""
    low = (text or "").lower()
    if re.search(r"\bfalse\b|\bno\b|\boff\b|^\s*0\s*$", low):
        return False
    return bool(re.search(r"\btrue\b|\byes\b|\bon\b|^\s*1\s*$|sequence[- ]parallel|\bsp\b|enabled", low))


_CHUNKS = (r"(?:vpp|virtual[ _-]?pipeline(?:[ _-]?(?:size|stages?|chunks?|parallel(?:ism)?))?|virtual stages|"
           r"chunks per (?:rank|device|gpu))\D{0,4}(\d+)|(\d+)\s*(?:model )?chunks")


def schedule_names_chunks(text: str) -> bool:
    """The schedule text gives the interleaved schedule's chunk count ("VPP=2", "virtual pipeline 4")."""
    return bool(re.search(_CHUNKS, (text or "").lower()))


# Zero-bubble schedules by their papers' and frameworks' names (Qi et al. 2024; sail-sg/zero-bubble-pipeline-
# parallelism; torch.distributed.pipelining; AMD Primus: zero-bubble / zbb, zbv, v-half, v-min). A bare "zero
# bubble" is ZB-H1 (ZB-1p), the variant with 1F1B's memory that the paper's implementation runs by default.
_ZERO_BUBBLE = (
    ("v-min", r"\bv[- _]?min\b"),
    ("v-half", r"\bv[- _]?half\b"),
    ("zbv", r"(?:\b|schedule)zbv(?:\b|zero)|\bv[- _]?zb\b|\bzb[- _]?v\b|zero[- _]?bubble[- _]?v\b|zerobubblev"),
    ("zb-h2", r"\bzb[- _]?h2\b|\bzb[- _]?2p\b"),
    ("zb-h1", r"\bzb[- _]?h1\b|\bzb[- _]?1p\b|\bzbb\b|zero[- _]?bubble"),
)


def schedule(text: str, pp: int, vpp: int) -> tuple[str, int]:
    """(schedule, chunks per device) from the row's words: gpipe, 1f1b, interleaved (vpp chunks), or a zero-bubble
    one (layout.SCHEDULES; the V-shape ones have 2 chunks)."""
    if pp == 1:
        return "none", 1
    low = (text or "").lower()
    # "interleaving not stated", "non-interleaved", "no interleaving" do not name the interleaved schedule
    low = re.sub(r"\b(non|no|not|without)[- ]?interleav\w*|interleav\w*\W{0,3}(not stated|off|false|disabled|no)\b",
                 " ", low)
    # "no zero-bubble", "zero bubble: disabled" do not name a zero-bubble schedule
    zb_low = re.sub(r"\b(?:non|no|not|without)[- ]?zero[- _]?bubble\w*|"
                    r"zero[- _]?bubble\w*\W{0,3}(?:not stated|off|false|disabled|no)\b", " ", low)
    m = re.search(_CHUNKS, low)
    if m and vpp == 1:
        vpp = int(m.group(1) or m.group(2))
    for name, pat in _ZERO_BUBBLE:  # before "interleaved": torch's ScheduleInterleavedZeroBubble is zero bubble
        if re.search(pat, zb_low):
            if name == "zb-h1" and (vpp > 1 or "interleav" in low):  # zero bubble looped over chunks
                return "zb-interleaved", max(vpp, 2)
            return name, 2 if name in V_SHAPE else 1
    if vpp > 1 or "interleav" in low:
        return "interleaved", max(vpp, 2)
    if "gpipe" in low:
        return "gpipe", 1
    return "1f1b", 1


_GATED_FAMILIES = r"llama|mistral|mixtral|qwen|deepseek|granite|swiglu|gated"


def activation(text: str, arch: str) -> tuple[str, list[str]]:
    """gelu, relu, squared-relu, silu, swiglu, geglu from the cell, else from the architecture."""
    low = clean(text).replace("_", "-").replace(" ", "").replace("²", "^2")
    # ReGLU costs what SwiGLU does (three matrices, one gated product): read as swiglu
    table = [("squared-relu", r"squared-?relu|relu\^?2|relusquared|sqrelu"),
             ("swiglu", r"swiglu|silu-?glu|swish-?glu|silu,linear|silu.*gated|gated.*silu|silu-?and-?mul|silu-?mul|"
                        r"\breglu"),
             ("geglu", r"geglu|gelu-?glu|gated-?gelu"), ("relu", r"^relu$|\brelu\b"), ("silu", r"^silu$|swish"),
             ("gelu", r"gelu")]
    if re.search(r"xielu", low):  # Apertus's xIELU: elementwise and not gated, two matrices as with gelu
        return "gelu", [f"ffn_act {text!r}: an elementwise, not gated activation, costed as gelu"]
    for name, pat in table:
        if re.search(pat, low):
            # LLaMA-family configs name the MLP's nonlinearity (HF `hidden_act: silu`, fms `activation_fn="silu"`);
            # their MLP is gated (w2(silu(w1 x) * w3 x)): SwiGLU
            if name == "silu" and re.search(_GATED_FAMILIES, (arch or "").lower()):
                return "swiglu", [f"ffn_act {text!r} in a LLaMA-family MLP: gated, swiglu"]
            return name, []
    if not blank(text):
        raise ValueError(f"ffn_act {text!r} is not modelled (gelu, relu, squared-relu, silu, swiglu, geglu)")
    a = (arch or "").lower()
    if re.search(r"llama|mistral|mixtral|qwen|swiglu|deepseek|gemma", a):
        return "swiglu", ["ffn_act not stated: swiglu from the architecture"]
    if re.search(r"gpt|opt|bloom|mpt|falcon|gelu", a):
        return "gelu", ["ffn_act not stated: gelu from the architecture"]
    return "gelu", ["ffn_act not stated: gelu assumed"]


def moe(text: str) -> dict[str, float]:
    """Experts, top-k, MoE layer frequency, capacity factor and expert parallelism named in text."""
    low = (text or "").lower()
    out: dict[str, float] = {}
    m = re.search(r"(\d+)\s*(?:routed\s+)?experts|experts\s*[=:]?\s*(\d+)|moe[- ](\d+)\b|(\d+)x\d+b", low)
    if m:
        out["experts"] = float(next(g for g in m.groups() if g))
    m = re.search(r"top[- _]?k?\s*[=:-]?\s*(\d+)|top[- ](\d+)", low)
    if m:
        out["top_k"] = float(next(g for g in m.groups() if g))
    if re.search(r"every (other|2nd|second) layer", low):
        out["moe_every"] = 2.0
    m = re.search(r"capacity[ _]factor\s*[=:]?\s*(\d+(?:\.\d+)?)", low)
    if m:
        out["capacity"] = float(m.group(1))
    # Megatron's --expert-model-parallel-size, torchtitan's expert_parallel_degree, "EP 8"
    m = re.search(r"(?:expert[-_ ](?:model[-_ ])?parallel(?:ism)?(?:[-_ ](?:size|degree))?|\bep)\s*[=:]?\s*(\d+)", low)
    if m:
        out["ep"] = float(m.group(1))
    m = re.search(r"(?:moe[-_ ]ffn[-_ ]hidden[-_ ]size|moe[-_ ]intermediate[-_ ]size|expert[-_ ]ffn(?:[-_ ]size)?)"
                  r"\s*[=:]?\s*(\d+)", low)
    if m:
        out["moe_ffn"] = float(m.group(1))
    return out


def sliding_window(text: str) -> tuple[int, float] | None:
    """(window, share of the blocks that use it) of a sliding-window attention the text names with its size:
    "sliding window 1024 on 5 of every 6 layers", "40 local layers, 8 global", "alternating sliding-window (128
    tokens)", "SWA window 4096 on 3 of every 4 layers", "pattern SSSL (short window = ... = 1024)"; every block
    where no share is said. None where no size is said ("without ... sliding-window attention"), or it is 0."""
    low = (text or "").lower()
    m = re.search(r"(?:sliding[- _]?window|\bswa\b)[^.;,()]{0,40}?(?:\(|\bof\b|=|:|\s)\s*(\d{2,7})\b", low)
    short = re.search(r"pattern\s+([sl]{2,})\b", low)
    size = re.search(r"short window\s*=\s*[^,;)]*?(\d{2,7})\s*[,;)]", low) if short else None
    if size:
        return int(size.group(1)), short.group(1).count("s") / len(short.group(1))
    if not m or int(m.group(1)) == 0:
        return None
    window = int(m.group(1))
    if r := re.search(r"on (\d+) of every (\d+) layers", low):
        return window, int(r.group(1)) / int(r.group(2))
    if r := re.search(r"(\d+) local (?:attention )?layers?\W+(\d+) global", low):
        return window, int(r.group(1)) / (int(r.group(1)) + int(r.group(2)))
    if re.search(r"alternat|every other layer|every (?:2nd|second) layer|skip_freq\s*2\b", low):
        return window, 0.5
    return window, 1.0


_PRESET_NAMES = [
    (r"llama[- _]?3(?:\.[0-9])?[- _]?(8|70|405)\s*b", "llama3-{}b"), (r"llama[- _]?2[- _]?(7|13|70)\s*b", "llama2-{}b"),
    (r"mixtral[- _]?8\s*x\s*(7|22)\s*b", "mixtral-8x{}b"), (r"gpt[- _]?3[- _]?(1\.3|2\.7|6\.7|13|175)\s*b", "gpt3-{}b"),
]


def preset_name(text: str) -> str | None:
    """The `model_spec.PRESETS` key a model name matches ("Llama 3.1 8B", "Llama-3-70B", "Mixtral 8x7B",
    "GPT-3 175B"), for rows that name a published model and leave its dimensions blank."""
    low = (text or "").lower()
    for pat, key in _PRESET_NAMES:
        m = re.search(pat, low)
        if m:
            return key.format(m.group(1))
    return None


def memory_kind(text: str) -> str:
    """What a measured memory figure counts: allocated (max allocated / active), reserved, or device."""
    # a kind the text rules out ("nvidia-smi memory used, not torch max allocated": BLOOM's benchmark notes) is not it
    low = re.sub(r"\b(?:not|rather than|instead of)\s+(?:the\s+)?(?:(?:py)?torch(?:'s)?[\s.]+)?(?:cuda\.)?"
                 r"(?:max(?:imum)?[ _])?(?:memory[ _])?(?:allocated|reserved|active)\b", " ", (text or "").lower())
    if re.search(r"max(imum)?[ _]allocated|memory active|peak memory active|active bytes|allocated", low):
        return "allocated"
    if "reserved" in low:
        return "reserved"
    return "device"


# a LoRA adapter's rank when the text names none: MLPerf llama2_70b_lora's (the adapters' cost barely depends on it)
DEFAULT_LORA_RANK = 16


def lora(text: str) -> tuple[int, str, float, list[str]]:
    """LoRA adapters in a row's text: (rank, targets, dropout, notes). targets: "attention" (qkv and the attention
    output projection, NeMo's default target_modules linear_qkv + linear_proj), "mlp" or "all"."""
    low = text.lower()
    notes: list[str] = []
    m = re.search(r"(?:adapter[_ ]dim|lora[_ ](?:rank|dim|r)|\brank)\W{0,3}(\d+)", low)
    rank = (int(m.group(1)) if m else 0) or DEFAULT_LORA_RANK
    if not m:
        notes.append(f"LoRA rank not stated: {DEFAULT_LORA_RANK} assumed")
    tm = re.search(r"target[_ ]modules[:= ]*(\[[^\]]*\]|[\w, .-]*)", low)
    tgt = tm.group(1) if tm else ""
    attn = re.search(r"attention|qkv|linear_proj|[qkvo]_proj", tgt)
    mlp = re.search(r"mlp|fc1|fc2|gate_proj|up_proj|down_proj", tgt)
    targets = "all" if re.search(r"\ball\b", tgt) or (attn and mlp) else "mlp" if mlp else "attention"
    if not tm:
        notes.append("LoRA target modules not stated: attention (qkv, output projection) assumed")
    d = re.search(r"(?:lora|adapter)[_ ]dropout\W{0,3}(\d*\.?\d+)", low)
    return rank, targets, float(d.group(1)) if d else 0.0, notes


def pure_bf16(text: str) -> bool:
    """Weights, gradients and optimizer states all 16-bit, no fp32 master copy, said in words: "pure bf16", "no fp32
    master copy", "amp_training False" beside a bf16 model ("without an fp32 master" too). A Hugging Face full
    fine-tune of a model loaded in bf16 runs so; the memory it needs is half the mixed-precision 16 B/param."""
    low = (text or "").lower()  # the whole cell: clean() keeps only what precedes a parenthesis
    return bool(re.search(r"pure[ _-]?(?:bf16|bfloat16|fp16|16[- ]bit)|(?:no|without)\s+(?:an?\s+)?fp32 master|"
                          r"amp_training\W{0,3}false", low))


# Model code that runs its RMSNorm and rotary embedding as chains of PyTorch ops when it is not compiled: Hugging Face
# transformers (LlamaRMSNorm: upcast, pow, mean, rsqrt, multiply, downcast, weight; apply_rotary_pos_emb with
# rotate_half), torchtitan (its RMSNorm class to 2025-03, then nn.RMSNorm; complex-number RoPE), torchtune, litgpt,
# IBM fms and the trainers built on them (VectorLM, ATorch, axolotl, LLaMA-Factory, TRL, ms-swift).
_EAGER_MODEL = (r"hugging ?face|\bhf\b|transformers|for ?causal ?lm|torchtitan|torchtune|lit-?gpt|\bfms\b|ibm-fms|"
                r"vectorlm|atorch|axolotl|accelerate|llama[- ]?factory|\btrl\b|ms-swift|eager")
# ...unless a stack with kernels of its own runs the model (Liger patches HF's norm, RoPE, SwiGLU and loss; XTuner
# dispatches HF's RMSNorm to its Triton kernel (xtuner/model/modules/dispatch/__init__.py); Transformer Engine layers;
# Unsloth; a Thunder/nvFuser/XLA/Neuron/Habana graph; Megatron/NeMo; NVIDIA's MLPerf containers)
_FUSED_STACK = (r"liger|xtuner|apex|transformer[ _-]?engine|\bte\b|unsloth|thunder jit|nvfuser|\bxla\b|neuron|"
                r"habana|gaudi|megatron|nemo|mlperf|nvidia release|meta internal")
_FUSED_NORM = r"fused[_ -]?(?:rms[_ -]?)?(?:layer[_ -]?)?norm|triton[_ -]?(?:rms[_ -]?|layer[_ -]?)?norm"
_FUSED_ROPE = r"fused[_ -]?(?:rotary|rope)|(?:rotary|rope)[_ -]?(?:kernel|triton|cuda)"
_MONTHS = {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                          "dec"))}


def eager_model(text: str) -> bool:
    """The text names model code that runs as PyTorch ops (HF transformers, torchtitan, torchtune, litgpt, fms and
    the trainers on them) and no stack that brings fused kernels for it (Liger, Transformer Engine, Megatron...)."""
    low = _negated_kernels((text or "").lower())
    return bool(re.search(_EAGER_MODEL, low)) and not re.search(_FUSED_STACK, low)


def _negated_kernels(low: str) -> str:
    """The text without kernel libraries said to be off ("Liger-Kernel OFF", "use_liger=False", "without Liger"),
    which name what a run compared with rather than what it ran."""
    lib = r"(?:liger(?:[- _]?kernels?)?|use_liger(?:_kernel)?|unsloth|apex|transformer[ _-]?engine)"
    low = re.sub(lib + r"\s*[:=]?\s*(?:off|false|disabled|none|no|0)\b", " ", low)
    return re.sub(r"\b(?:no|without|not|w/o)\W{1,3}" + lib, " ", low)


def fused_norm_named(text: str) -> bool:
    """A fused RMSNorm/LayerNorm kernel named (torchtitan's norm_type fused_rmsnorm, flash-attn's, a Triton one)."""
    return bool(re.search(_FUSED_NORM, (text or "").lower()))


def fused_rope_named(text: str) -> bool:
    """A fused rotary-embedding kernel named (flash-attn's apply_rotary, a Triton/CUDA one)."""
    return bool(re.search(_FUSED_ROPE, (text or "").lower()))


def rmsnorm(arch: str, gated: bool) -> bool:
    """The model normalises with RMSNorm: said so, else not LayerNorm where that is said, else a gated MLP (the
    Llama family; GPT-2, BERT, MPT, OPT, Falcon and Pythia pair LayerNorm with GELU)."""
    low = (arch or "").lower()
    if re.search(r"rms[ _-]?norm", low):
        return True
    return False if re.search(r"layer[ _-]?norm", low) else gated


# torch.nn.RMSNorm runs one fused CUDA kernel forward and one backward (aten::_fused_rms_norm, pytorch/pytorch#153666)
# from the nightlies of August 2025 (torch 2.9); before, it was the same chain of ops as the hand-written ones.
TORCH_FUSED_RMSNORM_SINCE = (2025, 8)


def torch_rmsnorm_fused(text: str) -> bool:
    """The run's torch has the fused nn.RMSNorm: a torch version of 2.9 or later, else a month of August 2025 or later
    ("2025-09-17", "Sept 2025"); a bare year or nothing is read as before (most published torchtitan runs are)."""
    low = (text or "").lower()
    versions = [(int(a), int(b)) for a, b in re.findall(r"(?:torch|pytorch)\W{0,3}(?:==|v)?\s*(2)\.(\d+)", low)]
    if versions:
        return max(versions) >= (2, 9)
    dates = _months(low)
    return bool(dates) and max(dates) >= TORCH_FUSED_RMSNORM_SINCE


def _months(low: str) -> list[tuple[int, int]]:
    """Every (year, month) the lower-cased text writes as a date ("2025-09-17") or a month and year ("Sept 2025")."""
    dates = [(int(y), int(m)) for y, m in re.findall(r"\b(20\d\d)-(\d\d)(?:-\d\d)?\b", low) if 1 <= int(m) <= 12]
    return dates + [(int(y), _MONTHS[m[:3]]) for m, y in re.findall(
        r"\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(20\d\d)\b", low)]


# torchtitan's sequence parallelism shards [batch, seq, hidden] activations on dim 1 until 73aed7f6c (PR #4121,
# 2026-08-20, which folds the batch into the tokens and shards dim 0): every TP all-gather is followed by
# torch.cat(torch.chunk(out, t, 0), dim=1) and every reduce-scatter preceded by the inverse, a copy of the whole
# gathered tensor each (torch/distributed/_functional_collectives.py all_gather_tensor / reduce_scatter_tensor with
# gather_dim != 0); torchtitan PR #437 measured the two cats of an FFN at 0.18 of 3 ms (6 %) on an H100.
TORCHTITAN_TP_DIM0_SINCE = (2026, 9)


def torchtitan_tp_copies(text: str) -> bool:
    """torchtitan named and the run before its dim-0 sequence sharding (no month said: before, as every published
    torchtitan TP run is)."""
    low = (text or "").lower()
    if "torchtitan" not in low:
        return False
    dates = _months(low)
    return not dates or max(dates) < TORCHTITAN_TP_DIM0_SINCE


# GPT-OSS's experts (a GLU clamped at 7 with a +1 offset on its linear half, biases on both expert linears) on
# Megatron-Core without Transformer Engine's op fuser, which the bf16 perf recipes turn off
# (Megatron-Bridge perf_recipes/_common.py `use_transformer_engine_op_fuser=False`): the clamps and their torch.cat run
# eagerly before the compiled quick-GEGLU (megatron/core/fusions/fused_bias_geglu.py, 2e29a5e1e3), and the fc2 bias,
# scaled by the router probability, is added by TEGroupedMLP._apply_bias as an fp32 pass per expert, concatenated and
# cast back (moe/experts.py, a329dd6da5). The fused path: the op fuser with the CuTe DSL grouped MLP (TE
# ScaledClampedQGeGLU and GroupedLinear(scale_bias=True); MCore 6815c0fefe), which the full-iteration MXFP8 recipes
# (_apply_gpt_oss_120b_full_iter_fp8mx_configs) turn on; Primus-Turbo's fused activation with probabilities.
_CLAMPED_GLU_MODEL = r"gpt[-_ ]?oss"
_EXPERT_PATH_FUSED = (r"op[-_ ]?fuser|cutedsl[-_ ]?fused[-_ ]?grouped[-_ ]?mlp|fused[-_ ]grouped[-_ ]mlp|"
                      r"full[-_ ]iter\w*fp8[-_ ]?mx|fused[-_ ]act\w*[-_ ]with[-_ ]probs")


def megatron_eager_expert_epilogue(model_text: str, run_text: str) -> bool:
    """GPT-OSS's clamped GLU and expert biases named (the model, or a clamp in a GLU with biases) and no fused expert
    path named: Megatron-Core runs the clamps and the fc2 bias as eager passes over every routed row."""
    model, run = (model_text or "").lower(), (run_text or "").lower()
    named = re.search(_CLAMPED_GLU_MODEL, model) or ("clamp" in model and "bias" in model)
    return bool(named) and not re.search(_EXPERT_PATH_FUSED, run)


# QLoRA's base weights in 4 bits, said so: "QLoRA", "NF4", bitsandbytes' load_in_4bit / bnb_4bit_* / Linear4bit, or
# 4-bit base / frozen / quantized weights ("adamw_torch_4bit", a 4-bit optimizer, is not it)
_FOUR_BIT_BASE = (r"\bqlora\b|\bnf4\b|load[_ ]in[_ ]4[_ ]?bit|\bbnb[_ ]4[_ ]?bit|linear4bit|"
                  r"4[- ]?bit\W{1,3}(?:nf4\W{1,3})?(?:base|frozen|quanti[sz]ed)\W{1,3}(?:model\W{1,3})?weights|"
                  r"(?:base|frozen) weights\W{1,3}(?:in\W{1,3})?(?:nf4\W{1,3})?4[- ]?bit")
_DOUBLE_QUANT = (r"double[_ -]?quant\w*(?:\W{1,3}(?:true|on|yes|1)\b|(?!\W{1,3}(?:false|off|no|0)\b))|"
                 r"compress_statistics\W{1,3}true")


def four_bit_base(text: str) -> tuple[bool, bool]:
    """(the frozen base weights are 4-bit, their constants double-quantised) from a row's words."""
    low = (text or "").lower()
    on = bool(re.search(_FOUR_BIT_BASE, low))
    return on, on and bool(re.search(_DOUBLE_QUANT, low))


# transformers' Llama 4 MoE (Llama4TextMoe.forward as released in 4.51, April 2025, and as read in later versions:
# `routed_in = hidden_states.repeat(num_experts, 1)` scaled by the router's sigmoid scores, zero off the top-k, then one
# batched matmul over every expert) runs every expert on every token; Axolotl's linearized experts
# (monkeypatch/models/llama4/modeling.py, 9f986f5e7) loop over all of them on the same repeated input. Unsloth's
# grouped-GEMM MoE, a hub kernel (use_kernels) or torchtitan / Megatron / MaxText route each token to its top-k only.
_HF_STACK = r"hugging ?face|transformers|axolotl|\btrl\b|accelerate|llama[- ]?factory|hf trainer|\bpeft\b"
_SPARSE_MOE_KERNELS = (r"unsloth|grouped[_ -]?(?:gemm|mm)|use_kernels|kernels? hub|megablocks|scattermoe|torchtitan|"
                       r"megatron|nemo|maxtext|deepspeed-moe|vllm")


def hf_dense_experts(model_text: str, run_text: str) -> bool:
    """A Llama 4 MoE run on transformers' model code (or Axolotl's patch of it), which computes every expert."""
    model, run = (model_text or "").lower(), (run_text or "").lower()
    return bool(re.search(r"llama[-_ ]?4", model) and re.search(_HF_STACK, run)
                and not re.search(_SPARSE_MOE_KERNELS, run))
