"""What the round-6 blind test found the model misreading (docs/perfmodel.md, "Blind test (round 6)"): each
reading is checked on the text as the sources wrote it, and each cost change against the model's own terms."""

from __future__ import annotations

import dataclasses

import pytest

from stride.perfmodel import row_text as rt
from stride.perfmodel.block_time import op_sac_share
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.frameworks import compiled
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.predict_rows import predict_row
from stride.perfmodel.published import row_inputs


@pytest.mark.parametrize(("text", "stage"), [
    # NeMo's tables have an FSDP column: 0 there is no FSDP, beside the distributed optimizer
    ("distributed optimizer (use_distributed_optimizer=True, recipe); table FSDP 0 (DDP)", 1),
    ("no FSDP, DDP", 0),
    ("FSDP: off", 0),
    ("FSDP1", 3),
    ("FSDP 8", 3),
    # Megatron-Core FSDP names what it shards
    ("Megatron FSDP; data_parallel_sharding_strategy optim_grads_params", 3),
    ("Megatron FSDP; data_parallel_sharding_strategy=optim_grads", 2),
    ("Megatron FSDP; data_parallel_sharding_strategy: optim", 1),
    # weights kept gathered from forward to backward: ZeRO-2's traffic (FSDP SHARD_GRAD_OP)
    ("FSDP2 (fully_shard), reshard_after_forward=False under PP", 2),
    ("FSDP as DP: shards optimizer states and gradients; model shards not resharded after forward", 2),
    ("FSDP (fully_sharded, --no-reshard-after-forward i.e. ZeRO-2-like)", 2),
    ("FSDP2 (fully_shard per TransformerBlock), reshard_after_forward default (True except last block)", 3),
])
def test_sharding_text(text: str, stage: int) -> None:
    assert rt.zero_stage(text)[0] == stage


@pytest.mark.parametrize(("text", "on"), [
    ("torchtitan (commit 9dec370), torch.compile: no", False),
    ("compile=False", False),
    ("without torch.compile", False),
    ("torchtitan, torch.compile: yes", True),
    ("OLMo-core, torch.compile of each block (compile=True)", True),
])
def test_compile_negated(text: str, on: bool) -> None:
    assert compiled(text) is on


@pytest.mark.parametrize(("text", "mode", "every", "layers"), [
    ("selective op (Selective activation checkpointing; selective_ac_option op)", "op-sac", 0, 0),
    ("per-op SAC (selective op)", "op-sac", 0, 0),
    ("selective (SelectiveAC: per-op SAC, llama3_8b config)", "op-sac", 0, 0),
    ("selective layer", "full", 2, 0),
    ('selective_ac_option = "3"', "full", 3, 0),
    ("selective (attention core only)", "selective", 0, 0),  # Megatron's selective is unchanged
    ("full, block, 5 layers (preset recompute_num_layers=5)", "full", 0, 5),
    ("--recompute-method block --recompute-num-layers 3", "full", 0, 3),
])
def test_recompute_text(text: str, mode: str, every: int, layers: int) -> None:
    assert rt.recompute(text) == mode
    assert rt.recompute_every(text) == every
    assert rt.recompute_layers(text) == layers


def _llama8b_row(**over: str) -> dict:
    row = {"row_id": "t", "model": "Llama 3 8B", "arch": "llama", "params_b": "8.03", "layers": "32",
           "hidden": "4096", "heads": "32", "kv_heads": "8", "ffn_hidden": "14336", "ffn_act": "swiglu",
           "vocab": "128256", "seq_len": "8192", "global_batch_seqs": "16", "micro_batch": "2",
           "gpu": "H100 SXM 80GB", "num_gpus": "8", "gpus_per_node": "8", "tp": "1", "pp": "1", "dp": "8",
           "cp": "1", "zero_or_fsdp": "FSDP2", "recompute": "full", "precision": "bf16",
           "framework": "torchtitan, torch.compile: yes"}
    return {**row, **over}


def test_op_sac_reruns_every_other_matmul() -> None:
    """torchtitan's op policy saves every other matmul of a block: for a gated GQA block (wq, wk, wv, wo, w1,
    w3, w2) it re-runs wk, wo and w3, 19456/53248 of the forward projection FLOPs at Llama 3 8B's shape."""
    inp = row_inputs(_llama8b_row(recompute="per-op SAC (selective op)"), load_catalog())
    assert inp.reason is None and inp.layout.recompute == "op-sac"
    spec = inp.spec
    widths = {"qkv": spec.q_dim + 2 * spec.kv_dim, "attn_out": spec.q_dim, "mlp_in": 2 * spec.ffn, "mlp_out": spec.ffn}
    rerun = sum(w * op_sac_share(spec, n) for n, w in widths.items())
    assert rerun / sum(widths.values()) == pytest.approx((1024 + 4096 + 14336) / 53248)
    eff = Efficiency()
    steps = {m: predict(spec, dataclasses.replace(inp.layout, recompute=m), inp.hardware, inp.global_batch, eff)
             for m in ("none", "op-sac", "full")}
    assert steps["none"].step_time_s < steps["op-sac"].step_time_s < steps["full"].step_time_s
    # the attention core is saved (SDPA is in the policy's save list): only the block's projections re-run
    assert steps["op-sac"].breakdown_s["attention"] == pytest.approx(steps["none"].breakdown_s["attention"])


def test_op_sac_reruns_the_routed_experts_whole() -> None:
    """The routed experts run as torch._grouped_mm, which torchtitan's save list never held: op-level SAC re-runs
    all of their GEMMs (the dense MLP's every other one); a MoE block's recompute is its experts' forward."""
    from stride.perfmodel.model_spec import TransformerSpec
    moe = TransformerSpec(layers=4, hidden=2048, heads=16, kv_heads=16, ffn=1408, act="swiglu", vocab=1024, seq=4096,
                          experts=64, top_k=6)
    assert op_sac_share(moe, "expert_in") == op_sac_share(moe, "expert_out") == 1.0
    assert op_sac_share(moe, "mlp_in") == 0.5 and op_sac_share(moe, "mlp_out") == 0.0


def test_layer_sac_recomputes_one_block_in_n() -> None:
    every2 = row_inputs(_llama8b_row(recompute="selective layer"), load_catalog())
    assert every2.layout.recompute == "full" and every2.layout.recompute_layers == 16
    full = row_inputs(_llama8b_row(recompute="full"), load_catalog())
    eff = Efficiency()
    t2 = predict(every2.spec, every2.layout, every2.hardware, every2.global_batch, eff).breakdown_s["gemm"]
    tf = predict(full.spec, full.layout, full.hardware, full.global_batch, eff).breakdown_s["gemm"]
    t0 = predict(full.spec, dataclasses.replace(full.layout, recompute="none"), full.hardware, full.global_batch,
                 eff).breakdown_s["gemm"]
    assert t2 - t0 == pytest.approx(0.5 * (tf - t0), rel=1e-6)


def test_power_limit_without_value_is_refused() -> None:
    out = predict_row(_llama8b_row(gpu="B200 (power limited)"), load_catalog(), Efficiency())
    assert out["tokens_per_s_per_gpu"] is None and "power limit without its value" in out["reason"]
    capped = predict_row(_llama8b_row(gpu="B200 power limited @ 700 W"), load_catalog(), Efficiency())
    assert capped["tokens_per_s_per_gpu"] and any("power cap 700 W" in n for n in capped.get("notes", []))


def test_blank_sharding_takes_the_distributed_optimizer_only_where_needed() -> None:
    """A run that ran fitted: with `zero_or_fsdp` blank, plain data parallelism where it fits, else ZeRO-1
    (which costs next to nothing) before any recompute."""
    catalog, eff = load_catalog(), Efficiency()
    sft7b = {"row_id": "sft", "model": "Llama 2 7B", "params_b": "6.74", "layers": "32", "hidden": "4096",
             "heads": "32", "kv_heads": "32", "ffn_hidden": "11008", "ffn_act": "swiglu", "vocab": "32000",
             "seq_len": "4096", "global_batch_seqs": "32", "micro_batch": "1", "gpu": "H100 SXM 80GB",
             "num_gpus": "8", "gpus_per_node": "8", "tp": "1", "pp": "1", "dp": "8", "cp": "1",
             "zero_or_fsdp": "", "recompute": "", "precision": "bf16", "framework": "NeMo"}
    out = predict_row(sft7b, catalog, eff)
    assert out["fits"] and "zero1" in out["layout"] and "rc-none" in out["layout"]
    assert any("distributed optimizer" in a for a in out["assumed"])
    ddp = predict_row({**sft7b, "zero_or_fsdp": "none"}, catalog, eff)
    assert "zero0" in ddp["layout"] and "rc-none" not in ddp["layout"]  # stated DDP: recompute had to give
    small = predict_row({**sft7b, "params_b": "1.3", "layers": "24", "hidden": "2048", "heads": "16",
                         "kv_heads": "16", "ffn_hidden": "5504"}, catalog, eff)
    assert "zero0" in small["layout"] and any("plain data parallelism" in a for a in small["assumed"])


@pytest.mark.parametrize(("text", "expect"), [
    ("Megatron 1F1B (interleaving not stated for this table)", ("1f1b", 1)),
    ("non-interleaved 1F1B", ("1f1b", 1)),
    ("interleaved 1F1B", ("interleaved", 2)),
])
def test_schedule_negated_interleaving(text: str, expect: tuple[str, int]) -> None:
    assert rt.schedule(text, 8, 1) == expect


def test_no_selective_recompute_before_it_was_published() -> None:
    """A blank recompute is the cheapest mode that fits, among the modes the run's date allows: selective
    recompute (Korthikanti et al., arXiv:2205.05198) is not a choice for a run described in January 2022."""
    catalog, eff = load_catalog(), Efficiency()
    row = {"row_id": "mtnlg", "model": "MT-NLG 530B", "params_b": "530", "layers": "105", "hidden": "20480",
           "heads": "128", "ffn_act": "gelu", "vocab": "51200", "seq_len": "2048", "global_batch_seqs": "1920",
           "micro_batch": "1", "gpu": "A100 80GB", "num_gpus": "2240", "gpus_per_node": "8", "tp": "8",
           "pp": "35", "dp": "8", "cp": "1", "zero_or_fsdp": "ZeRO stage 1", "recompute": "",
           "precision": "fp16 mixed", "framework": "DeepSpeed + Megatron-LM", "source": "Smith et al. 2022"}
    late = predict_row(row, catalog, eff)  # "2022" alone may be after May
    early = predict_row({**row, "source": "Smith et al. 2022 (arXiv:2201.11990)"}, catalog, eff)
    assert "rc-selective" in late["layout"]  # the cheapest mode that fits
    assert "rc-full" in early["layout"] and early["iter_time_s"] > late["iter_time_s"]


def test_holdout_rows_are_never_fitted() -> None:
    """The held-out rounds (26-34) stay out of the development set: the fit and the held-out judge glob the top
    level of data/perfmodel only; the holdout files still read (each row answered or refused by name)."""
    from stride.perfmodel.evaluate import DATA_DIR, data_files
    from stride.perfmodel.predict_rows import predict_csv

    files = data_files()
    assert files and not any("holdout" in p.parts for p in files)
    holdout = sorted((DATA_DIR / "holdout").glob("*.csv"))
    assert holdout
    for path in holdout:
        for out in predict_csv(path, load_catalog(), Efficiency()):
            assert out["tokens_per_s_per_gpu"] or out["reason"], out


def test_precision_column_decides_over_framework_words() -> None:
    """A framework cell naming a recipe ("spmd_types (nvfp4 recipe)") does not turn a bf16 run into NVFP4; where
    the precision column is silent the framework's words still fill it in."""
    catalog = load_catalog()
    fw = "torchtitan, torch.compile: yes, spmd_backend spmd_types (nvfp4 recipe)"
    assert row_inputs(_llama8b_row(precision="bf16 mixed", framework=fw), catalog).layout.precision == "bf16"
    assert row_inputs(_llama8b_row(precision="", framework=fw, gpu="B200"), catalog).layout.precision == "fp4"
    # on a part without an FP4 peak the row is refused when read, naming it (not mid-way through a fit)
    h100 = row_inputs(_llama8b_row(precision="", framework=fw), catalog)
    assert h100.reason and "no fp4 peak" in h100.reason, h100.reason


def test_op_sac_memory_between_full_and_none() -> None:
    """Per-op SAC keeps the block input and every other matmul's output: less than Megatron's selective (all
    projections' inputs and outputs), more than full recompute (the block input)."""
    from stride.perfmodel.activations import layer_activation_bytes

    spec = row_inputs(_llama8b_row(), load_catalog()).spec
    by = {m: layer_activation_bytes(spec, 2, recompute=m) for m in ("full", "op-sac", "selective", "none")}
    assert by["full"] < by["op-sac"] < by["selective"] <= by["none"]
    tokens, h = 2 * spec.seq, spec.hidden
    kept = 2 * tokens * (h + spec.q_dim + spec.kv_dim + spec.ffn + spec.q_dim + h) + 4 * tokens * spec.heads
    assert by["op-sac"] == pytest.approx(kept)


def test_context_parallel_ranks_shard_fsdp_states() -> None:
    """FSDP over dp_shard 1 x cp 8 still shards the states over the 8 ranks (torchtitan's dp_shard_cp mesh)."""
    inp = row_inputs(_llama8b_row(dp="1", cp="8", zero_or_fsdp="FSDP2"), load_catalog())
    assert inp.layout.zero == 3 and inp.layout.state_shards == 8


def test_plan_hardware_reads_a_described_part(capsys: pytest.CaptureFixture[str]) -> None:
    """`stride plan --hardware` reads a part the way --from-csv reads the gpu column: a stated power cap and
    memory modify the catalog part (and are printed), a limit without its value is an error, not plain B200."""
    import json

    from stride.cli.main import main

    args = ["plan", "--model", "llama3-8b", "--devices", "8", "--global-batch", "64", "--json"]
    assert main([*args, "--hardware", "h100-sxm"]) == 0
    plain = json.loads(capsys.readouterr().out)["best"]
    assert main([*args, "--hardware", "H100 SXM 96GB @ 500 W"]) == 0
    captured = capsys.readouterr()
    capped = json.loads(captured.out)["best"]
    assert "power cap 500 W" in captured.err and "memory 96 GB" in captured.err
    assert capped["step_time_s"] > plain["step_time_s"]
    assert main([*args, "--hardware", "B200 (power limited)"]) == 2
    assert "power limit without its value" in capsys.readouterr().err


def test_interleaved_schedule_without_chunk_count_takes_the_fastest() -> None:
    """'interleaved' with no chunk count: each count that splits the blocks evenly (or with the embedding and
    loss as stages) is tried and the fastest kept, as a tuned run would be; a stated count is kept as stated."""
    catalog, eff = load_catalog(), Efficiency()
    row = _llama8b_row(num_gpus="64", dp="4", tp="4", pp="4", global_batch_seqs="64", micro_batch="1",
                       zero_or_fsdp="distributed optimizer", recompute="none", pp_schedule="interleaved 1F1B",
                       framework="Megatron-LM")
    inp = row_inputs(row, catalog)
    assert inp.vpp_choices == (2, 4, 8)  # 32 blocks over 4 stages: 2, 4 or 8 chunks a rank
    out = predict_row(row, catalog, eff)
    chosen = int(out["layout"].split("interleavedv")[1].split()[0])
    times = {v: predict(inp.spec, dataclasses.replace(inp.layout, vpp=v), inp.hardware, inp.global_batch, eff)
             for v in inp.vpp_choices}
    assert out["iter_time_s"] == pytest.approx(min(p.step_time_s for p in times.values() if p.fits))
    assert any(f"chose {chosen} chunks" in a for a in out["assumed"])
    stated = row_inputs({**row, "vpp": "2"}, catalog)
    assert not stated.vpp_choices and stated.layout.vpp == 2
    named = row_inputs({**row, "pp_schedule": "interleaved, VPP=4"}, catalog)
    assert not named.vpp_choices and named.layout.vpp == 4


@pytest.mark.parametrize(("text", "offloaded"), [
    ("none (V2 preset sets no recompute and no CPU offloading; cpu_offloading_num_layers=None)", False),
    ("ZeRO-2, offload none", False),
    ("full, no offload", False),
    ("none; activation CPU offloading of 20 layers (preset cpu_offloading_num_layers=20)", True),
    ("no recompute; activation CPU offloading cpu_offloading_num_layers=40 (cpu_offloading_weights False)", True),
    ("ZeRO-3, offload_param: cpu", True),
])
def test_offloading_said_off_is_not_offloading(text: str, offloaded: bool) -> None:
    """Round 8's blind rows: a preset that says offloading is off was refused as offloading (7 of 60 rows)."""
    assert rt.offloads(text) is offloaded


def test_an_optimizer_name_alone_is_no_sharding() -> None:
    assert rt.zero_stage("fused_adam (script: peft.model.optim.name=fused_adam; adapters only)")[0] == 0
    assert rt.zero_stage("AdamW")[0] == 0
    with pytest.raises(ValueError):
        rt.zero_stage("optimizer states sharded somehow")  # sharding words it cannot place stay refused


def test_tf32_runs_on_tensor_cores_with_fp32_storage() -> None:
    """'tf32' was read as fp32 on CUDA cores: ~7x too slow on an H100 (TF32 dense 494.5 against fp32 66.9)."""
    catalog, eff = load_catalog(), Efficiency()
    rows = {p: predict_row(_llama8b_row(precision=p, num_gpus="64", dp="64", global_batch_seqs="64",
                                        micro_batch="1", recompute="full"), catalog, eff)
            for p in ("bf16", "tf32", "fp32")}
    assert "tf32" in rows["tf32"]["layout"] and "fp32" in rows["fp32"]["layout"]
    assert rows["fp32"]["iter_time_s"] > 3 * rows["tf32"]["iter_time_s"] > 3 * rows["bf16"]["iter_time_s"]
    # fp32 storage: weights, gradients and activations as large as fp32's
    assert rows["tf32"]["device_mem_gib"] == pytest.approx(rows["fp32"]["device_mem_gib"], rel=0.01)


def test_launch_floor_only_for_tiny_kernels() -> None:
    """A step is never shorter than launching its kernels (kernel_overhead_us each): a 1-layer, 8-wide model
    with 1-token sequences is launch-bound; Llama 3 8B is not."""
    catalog, eff = load_catalog(), Efficiency()
    from stride.perfmodel.costmodel import kernels_per_block
    from stride.perfmodel.model_spec import parse_model_spec

    tiny = parse_model_spec("layers=1,hidden=8,heads=1,vocab=10,seq=1")
    hw = catalog.get("h100-sxm")
    lay = row_inputs(_llama8b_row(), catalog).layout
    lay = dataclasses.replace(lay, zero=0, recompute="none", micro_batch=8, compile=True)
    pred = predict(tiny, lay, hw, 8 * 8 * 1000, eff)  # 1000 micro-batches a rank
    floor = 1000 * kernels_per_block(lay, True) * hw.kernel_overhead_us * 1e-6
    assert pred.step_time_s == pytest.approx(floor) and pred.breakdown_s["host_bound"] > 0
    big = row_inputs(_llama8b_row(), catalog)
    assert predict(big.spec, big.layout, big.hardware, big.global_batch, eff).breakdown_s["host_bound"] == 0


@pytest.mark.parametrize(("text", "stage"), [("0", 0), ("1", 1), ("2", 2), ("3", 3), ("False", 0), ("off", 0)])
def test_bare_zero_stage(text: str, stage: int) -> None:
    assert rt.zero_stage(text)[0] == stage


def test_cpu_ranks_share_the_host_memory() -> None:
    """Two ranks of 15 GiB fit two 16 GiB accelerators but not one 24 GiB CPU host, whose ranks share its RAM."""
    catalog = load_catalog()
    gib = 2**30
    gpu = dataclasses.replace(catalog.get("h100-sxm"), memory_gib=16.0)
    cpu = dataclasses.replace(catalog.get("epyc-9654"), memory_gib=24.0, scaleup_domain=2)
    assert gpu.fits(15 * gib, 2) and cpu.fits(15 * gib, 1)
    assert not cpu.fits(15 * gib, 2)


def test_fsdp2_under_a_pipeline_holds_unsharded_gradients() -> None:
    """torch.distributed.pipelining turns FSDP2's gradient sync off until the last micro-batch: a stage's gradients
    stay unsharded across the step, accumulated in the reduce dtype (FSDPParam.to_accumulated_grad_if_needed casts
    them to it): 4 bytes a parameter more than ZeRO-2 without a pipeline with an fp32 reduce, 2 with a bf16 one."""
    from stride.perfmodel.memory_model import _states

    catalog = load_catalog()
    lay = row_inputs(_llama8b_row(num_gpus="16", dp="8", pp="2", zero_or_fsdp="FSDP2, reshard_after_forward=False",
                                  pp_schedule="1F1B"), catalog).layout
    assert lay.zero == 2 and lay.pp == 2
    params = 1e9
    piped, flat = _states(lay, params, 4), _states(dataclasses.replace(lay, pp=1), params, 4)
    assert piped["grads"] - flat["grads"] == pytest.approx(4.0 * params)
    assert _states(lay, params, 2)["grads"] - _states(dataclasses.replace(lay, pp=1), params, 2)["grads"] == \
        pytest.approx(2.0 * params)
    other = dataclasses.replace(lay, framework="fsdp1")  # not torch's pipelining: unchanged
    assert _states(other, params, 4)["grads"] == _states(dataclasses.replace(other, pp=1), params, 4)["grads"]


def test_from_csv_rows_with_a_measurement_show_their_error() -> None:
    """A user's own measured runs come back with the measurement (by the row's FLOP convention) and the
    prediction's error against it; a row without a measurement gets neither."""
    catalog, eff = load_catalog(), Efficiency()
    row = _llama8b_row(meas_tokens_per_s_per_gpu="5762")
    out = predict_row(row, catalog, eff)
    assert out["measured_tokens_per_s_per_gpu"] == pytest.approx(5762.0)
    assert out["error_pct"] == pytest.approx((out["tokens_per_s_per_gpu"] / 5762.0 - 1) * 100)
    bare = predict_row(_llama8b_row(), catalog, eff)
    assert "measured_tokens_per_s_per_gpu" not in bare and "error_pct" not in bare
