"""Bytes of activations saved for backward, per block and micro-batch, on one device.

Generalises Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", sbh(34 + 5as/h) for GPT with 16-bit activations and 1-byte dropout masks) to GQA,
swiglu, no-dropout models and flash attention:

- kept whole on every tensor-parallel rank unless sequence parallel shards it: both norm
  inputs (2h each), the inputs of the QKV and MLP-in matmuls (2h each), dropout masks (h each);
- sharded by TP: Q, K, V (2(h + 2 kv_dim)), attention output (2h), MLP: gelu 2f + 2f,
  swiglu 4f (gate, up) + 2f (MLP-out input);
- attention core per (head, query, key): softmax output 2 bytes, + dropout mask 1 and
  dropout output 2 with dropout; flash attention keeps only a 4-byte log-sum-exp per (head, query).
Selective recompute drops the attention core; full recompute keeps only each block's input.
"""

from __future__ import annotations

from stride.perfmodel.model_spec import TransformerSpec

ACT_BYTES = 2  # bf16/fp16 activations (fp8 training keeps 16-bit activations for backward)


def layer_activation_bytes(spec: TransformerSpec, micro_batch: int, tp: int = 1, sp: bool = False,
                           cp: int = 1, recompute: str = "none", flash: bool = True) -> float:
    """Saved-for-backward bytes of one block for one micro-batch on one device."""
    s = spec.seq / cp
    tokens = micro_batch * s
    h, f = spec.hidden, spec.ffn
    shard = tp if sp else 1
    if recompute == "full":
        return ACT_BYTES * tokens * h / shard
    if recompute == "op-sac":
        # torchtitan's per-op SAC keeps the block's input and every other matmul's output (wq, wv, w1 and, gated,
        # w2; block_time.op_sac_share), attention's output and log-sum-exp; the rest is re-run in backward
        saved_mm = spec.q_dim + spec.kv_dim + f  # column-parallel outputs: sharded by tp
        out = h / shard if spec.gated else 0.0  # w2's output, reduce-scattered under SP
        return ACT_BYTES * tokens * (h / shard + (saved_mm + spec.q_dim) / tp + out) + tokens * 4.0 * spec.heads / tp
    mask = 1 if spec.dropout else 0
    # two norm inputs + the QKV and MLP-in matmul inputs (16-bit), two dropout masks (1 byte)
    replicated = ACT_BYTES * 4 * h + mask * 2 * h
    # gelu/relu: its input and the MLP-out input; gated (swiglu, geglu): gate and up, and the MLP-out input
    mlp = ACT_BYTES * (3 * f if spec.gated else 2 * f)
    sharded = ACT_BYTES * (spec.q_dim + 2 * spec.kv_dim) + ACT_BYTES * spec.q_dim + mlp
    per_token = replicated / shard + sharded / tp
    heads_local = spec.heads / tp
    if flash:
        core = 4.0 * heads_local  # fp32 log-sum-exp per head and query
    elif recompute == "selective":
        core = 0.0
    else:
        core = (ACT_BYTES + (1 + ACT_BYTES) * mask) * heads_local * spec.seq  # per query: all keys
    return tokens * (per_token + core)

