"""QLoRA: frozen base weights stored in 4 bits (bitsandbytes NF4 / FP4), dequantised to 16 bits for every matmul.

Read from bitsandbytes (functional.quantize_4bit / dequantize_4bit, autograd MatMul4Bit; blocksize 64 by default):
each linear's weight is 4-bit codes (0.5 B a parameter) plus one fp32 absmax per 64 values (0.0625 B), or, with
double quantisation (`compress_statistics`, `bnb_4bit_use_double_quant`), an 8-bit absmax per 64 and an fp32 one
per 256 x 64 (0.0159 B). Every use dequantises the whole weight into a 16-bit copy the GEMM then reads: the forward,
the backward's input gradient (MatMul4Bit.backward dequantises again; the frozen weight needs no weight gradient) and
a recomputed forward. Embeddings, norms and the LM head stay 16-bit (transformers' BitsAndBytesConfig skips the head;
fsdp_qlora quantises the blocks' linears only). FSDP gathers the packed 4-bit storage (`bnb_4bit_quant_storage`
bf16 holds the same bytes).
"""

from __future__ import annotations

from stride.perfmodel.flops import blocks_params, total_params
from stride.perfmodel.model_spec import TransformerSpec

NF4_BYTES = 0.5 + 4 / 64  # codes + an fp32 absmax per block of 64
NF4_DOUBLE_QUANT_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
DEQUANT_WRITE_BYTES = 2.0  # the 16-bit copy each use writes (the GEMM's read of it is in its roofline)


def stored_bytes(double_quant: bool) -> float:
    """Bytes a 4-bit weight parameter occupies, constants included."""
    return NF4_DOUBLE_QUANT_BYTES if double_quant else NF4_BYTES


def quantized_share(spec: TransformerSpec) -> float:
    """The share of the model's parameters stored in 4 bits: the blocks' (their norms are < 0.1 %)."""
    return blocks_params(spec) / total_params(spec)


def frozen_bytes_per_param(spec: TransformerSpec, double_quant: bool, wide: float = 2.0) -> float:
    """Mean bytes a frozen parameter occupies (and FSDP gathers): 4-bit blocks, `wide`-byte embeddings and head."""
    q = quantized_share(spec)
    return q * stored_bytes(double_quant) + (1 - q) * wide


def dequant_bytes_per_use(double_quant: bool) -> float:
    """Memory traffic per weight parameter each time a 4-bit weight is used: read it, write its 16-bit copy."""
    return stored_bytes(double_quant) + DEQUANT_WRITE_BYTES
