"""What the round-13 blind test found the model misreading or refusing (docs/perfmodel.md, "Blind test (round 13)"):
each reading is checked on the text as the sources wrote it."""

from __future__ import annotations

import pytest

from stride.perfmodel import row_text as rt
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.published import row_inputs


def _row(**over: str) -> dict:
    row = {"row_id": "t", "model": "Llama 2 70B", "arch": "llama", "params_b": "70", "layers": "80",
           "hidden": "8192", "heads": "64", "kv_heads": "8", "ffn_hidden": "28672", "ffn_act": "swiglu",
           "vocab": "32000", "seq_len": "4096", "global_batch_seqs": "512", "micro_batch": "1",
           "gpu": "H100 SXM 80GB", "num_gpus": "64", "gpus_per_node": "8", "tp": "8", "pp": "1", "dp": "8",
           "cp": "1", "sp": "", "zero_or_fsdp": "distributed optimizer", "recompute": "selective", "precision": "bf16",
           "framework": "NeMo 24.07 (Megatron-Core)"}
    return {**row, **over}


@pytest.mark.parametrize(("over", "sp"), [
    # Megatron-Core / NeMo and torchtitan run TP with sequence parallelism unless they say not (Nemotron-4 340B's
    # report states TP 8 and no SP either way: read as off, it was predicted 31% slow)
    ({}, True),
    ({"framework": "torchtitan (FSDP2 + TP)"}, True),
    ({"sp": "False"}, False),  # said off
    ({"sp": "true"}, True),
    ({"tp": "1", "dp": "64"}, False),  # nothing to shard over the sequence
    # a framework the row does not name, or one without that default, keeps it off
    ({"framework": ""}, False),
    ({"framework": "ColossalAI HybridParallelPlugin"}, False),
    ({"framework": "Megatron-DeepSpeed"}, False),
    # Megatron before sequence parallelism came (2022-05, with selective recompute), however the paper is cited
    ({"framework": "Megatron-LM 2021 (arXiv:2104.04473)", "recompute": "full"}, False),
    ({"framework": "Megatron-LM (https://arxiv.org/abs/2104.04473)", "recompute": "full"}, False),
    # the FSDP2 profile's other trainers: the evidence (torchtitan's TP plan) does not speak for them
    ({"framework": "PyTorch FSDP2 + DTensor TP (custom trainer)"}, False),
])
def test_blank_sp_with_tensor_parallelism_is_on_where_the_framework_defaults_to_it(over: dict, sp: bool) -> None:
    inp = row_inputs(_row(**over), load_catalog())
    assert inp.reason is None, inp.reason
    assert inp.layout.sp is sp
    assert any("sp blank" in n for n in inp.notes) is (sp and not over.get("sp"))


@pytest.mark.parametrize(("text", "prec"), [
    # DeepLearningExamples' Transformer-XL TF32 rows: "no --fp16" was read as fp16 (predicted at twice TF32's peak)
    ("TF32 (FP32 training with TF32 Tensor Core math on Ampere; no --fp16)", "tf32"),
    ("mixed precision (--fp16; train.py defaults --amp apex)", "fp16"),
    ("fp16=false; tf32", "tf32"),
    ("without fp8, bf16 mixed", "bf16"),
    ("fp8: false, bf16", "bf16"),
    ("non-fp8 bf16 run", "bf16"),
    ("bf16 (no fp32 master copy)", "bf16"),
    ("fp8 delayed scaling", "fp8"),
    # the review's cases: a format said of something else stays read; lists and w/o are negated
    ("bf16: no fp32 master weights", "bf16"),
    ("fp16: no dynamic loss scaling", "fp16"),
    ("TF32: no, FP16: yes", "fp16"),
    ("TF32 (no fp16/bf16)", "tf32"),
    ("FP32 (no TF32)", "fp32"),
    ("bf16 w/o fp8", "bf16"),
    ("fp16 off; tf32", "tf32"),
    ("fp8=0.5 ratio", "fp8"),
    ("fp16 (no bf16 support on V100)", "fp16"),
])
def test_a_negated_number_format_is_not_read(text: str, prec: str) -> None:
    assert rt.precision(text)[0] == prec


def _size_only(params_b: str, act: str = "", **over: str) -> dict:
    # Modalities' README scaling table gives the parameter count of its GPT-2-style models and no dimensions
    base = {"model": f"GPT-2-style decoder, {params_b}B", "arch": "GPT2LLM decoder", "params_b": params_b,
            "layers": "", "hidden": "", "heads": "", "kv_heads": "", "ffn_hidden": "", "ffn_act": act, "vocab": "",
            "tp": "1", "dp": "64", "zero_or_fsdp": "FSDP FULL_SHARD", "framework": "PyTorch FSDP"}
    return _row(**{**base, **over})


@pytest.mark.parametrize(("params_b", "act", "over", "layers", "hidden"), [
    ("6.7", "", {}, 33, 4096),  # GPT-3 6.7B's width (its 32 blocks hold 6.4B; a 32k vocabulary assumed)
    ("2.7", "gelu", {}, 33, 2560),  # GPT-3 2.7B's
    ("28", "", {}, 52, 6656),  # log-log between GPT-3 13B's 5120 and 175B's 12288
    ("6.7", "swiglu", {}, 32, 4096),  # LLaMA 7B's shape: a gated MLP holds what a 4h one does
    ("28", "", {"tp": "8", "dp": "8"}, 61, 6144),  # whole heads that TP 8 divides (6656 has 52: refused before)
    ("500", "swiglu", {}, 135, 17536),  # past 175B along the last pair's line (Llama 3 405B: 16384)
    ("1", "swiglu", {"vocab": "128256"}, 14, 1792),  # Llama 3.2 1B: 16 blocks of 2048
])
def test_a_dense_row_with_only_its_size_is_read_in_its_familys_shape(params_b: str, act: str, over: dict,
                                                                      layers: int, hidden: int) -> None:
    inp = row_inputs(_size_only(params_b, act, **over), load_catalog())
    assert inp.reason is None, inp.reason
    spec = inp.spec
    assert (spec.layers, spec.hidden) == (layers, hidden)
    assert spec.heads == hidden // 128 and spec.heads % int(over.get("tp", "1")) == 0
    # the weights make the stated size (within a block's worth)
    gated = spec.act in ("swiglu", "geglu")
    block = 4 * spec.hidden**2 + (3 if gated else 2) * spec.hidden * spec.ffn
    embed = spec.vocab * spec.hidden * (2 if gated else 1)
    assert abs(spec.layers * block + embed - float(params_b) * 1e9) <= block
    assert any("width and depth not stated" in n and "assumed" in n for n in inp.notes)


def test_size_alone_is_not_read_where_it_cannot_say_the_shape() -> None:
    catalog = load_catalog()
    reason = lambda row: row_inputs(row, catalog).reason or ""  # noqa: E731
    # a MoE row (its total and active parameters differ), named in any of the columns the model reads for it
    assert "`hidden` is blank" in reason(_row(model="an in-house 47B MoE", arch="MoE, 8 experts, top-2",
                                              layers="", hidden="", params_b="47"))
    assert "`hidden` is blank" in reason(_size_only("46.7", notes="MoE: 8 experts top-2"))
    assert "`hidden` is blank" in reason(_row(model="a 7B decoder", arch="decoder", layers="32", hidden="",
                                              params_b="7"))  # one dimension stated: the row says the other
    assert "`hidden` is blank" in reason(_size_only("0.05"))  # below the family: mostly embedding
    # a narrow model with no vocabulary is refused as when its dimensions are stated
    assert "`vocab` is blank" in reason(_size_only("0.76"))
    assert "`vocab` is blank" in reason(_size_only("0.76", hidden="1536", layers="24"))


@pytest.mark.parametrize(("text", "mode"), [
    # NeMo 25.04's GB200 rows: a clause about CUDA graphs made its bare "on" a full recompute (-26% to -32%)
    ("none (no activation recompute in the recipe or perf script); CUDA graphs on (csv)", "none"),
    ("none; CUDA graphs on for b200 (script)", "none"),
    ("selective; CUDA graphs on", "selective"),
    ("none; full CUDA graphs", "none"),
    ("none; FSDP full shard", "none"),
    ("full (uniform, every layer); CUDA graphs off", "full"),
    # clauses that do speak of recompute still decide as before
    ("HF gradient checkpointing (--gradient_checkpointing); fsdp_activation_checkpointing false", "full"),
    ("on", "full"),
    ("full, block, 5 layers", "full"),
])
def test_a_clause_about_something_else_says_nothing_of_recompute(text: str, mode: str) -> None:
    assert rt.recompute(text) == mode
