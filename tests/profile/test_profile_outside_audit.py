"""`stride analyze` judged from outside on traces whose answer is known by construction (every figure below is
the trace's own arithmetic, in µs), and a defect that audit found: a GPU step of elementwise kernels read
"compute-bound: fewer, larger matmuls" (a kernel without `dur`: test_profile_missing_dur.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from synth import host, kernel, launch, write  # noqa: E402

from stride.profile.analyze import analyze_traces  # noqa: E402

GEMM = "ampere_sgemm_128x64_tn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, Array<char*, 3>>"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def steps(per_step: list[tuple[str, float, float, int]], n: int = 3, step_us: float = 1000.0,
          cat: str = "kernel") -> dict:
    """n profiler steps of `step_us`, each with kernels (name, start in the step, duration, stream), each
    launched at the step's start (the host is never late)."""
    ev: list[dict] = []
    corr = 0
    for k in range(n):
        s = 10_000.0 + step_us * k
        ev.append(host(f"ProfilerStep#{k + 1}", s, step_us, cat="user_annotation"))
        for name, at, dur, stream in per_step:
            corr += 1
            kcat = "gpu_memcpy" if name.startswith("Memcpy") else cat
            ev += [launch(s + corr % 7, corr), kernel(name, s + at, dur, stream, corr, cat=kcat)]
    return {"schemaVersion": 1, "traceEvents": ev}


@pytest.mark.parametrize("name, figures, bound", [
    # 19 GEMMs of 50 µs back to back from 25 to 975 µs: busy 95 %
    ("compute", {"compute_pct": 95.0, "idle_pct": 5.0, "exposed_comm_pct": 0.0}, "compute-bound"),
    # GEMM [0, 300), all-reduce [300, 800) on another stream: 500 µs exposed, overlap 0
    ("comm", {"compute_pct": 30.0, "exposed_comm_pct": 50.0, "idle_pct": 20.0}, "communication-bound"),
    # GEMM [0, 900), all-reduce [100, 600): hidden whole
    ("hidden", {"compute_pct": 90.0, "exposed_comm_pct": 0.0, "idle_pct": 10.0}, "compute-bound"),
    # GEMM [0, 400), all-reduce [200, 700): 200 of 500 µs under compute (40 %), 300 exposed
    ("partly", {"compute_pct": 40.0, "exposed_comm_pct": 30.0, "idle_pct": 30.0}, "communication-bound"),
    # GEMM [0, 800) s7; async copies [100, 400) s9 (hidden) and [850, 900) s9 (50 µs exposed)
    ("async_copy", {"compute_pct": 80.0, "exposed_memory_pct": 5.0, "idle_pct": 15.0}, "compute-bound"),
])
def test_known_gpu_steps(tmp_path: Path, name: str, figures: dict, bound: str) -> None:
    kernels = {
        "compute": [(GEMM, 25.0 + 50.0 * j, 50.0, 7) for j in range(19)],
        "comm": [(GEMM, 0.0, 300.0, 7), (NCCL, 300.0, 500.0, 8)],
        "hidden": [(GEMM, 0.0, 900.0, 7), (NCCL, 100.0, 500.0, 8)],
        "partly": [(GEMM, 0.0, 400.0, 7), (NCCL, 200.0, 500.0, 8)],
        "async_copy": [(GEMM, 0.0, 800.0, 7), ("Memcpy HtoD (Pinned -> Device)", 100.0, 300.0, 9),
                       ("Memcpy DtoD (Device -> Device)", 850.0, 50.0, 9)],
    }[name]
    r = analyze_traces([write(tmp_path / f"{name}.json", steps(kernels))])["ranks"]["0"]
    assert r["steps"] == [1, 2, 3] and r["span_us"] == pytest.approx(3000.0)
    for k, v in figures.items():
        assert r["temporal_breakdown"][k] == pytest.approx(v, abs=1e-9), k
    overlap = {"comm": 0.0, "hidden": 100.0, "partly": 40.0}.get(name)
    assert r["comm_comp_overlap_pct"] == (pytest.approx(overlap) if overlap is not None else None)
    assert r["verdict"]["bound"] == bound and r["verdict"]["steps_by_bound"] == {bound: 3}


def test_gpu_kernel_classes_by_their_own_names() -> None:
    """The kernel's own name decides, not its template arguments (an elementwise functor may say `gemm`)."""
    from stride.profile.classify import OP_MATH, OP_MEMORY, OP_OTHER, gpu_kernel_class

    assert gpu_kernel_class(GEMM) == OP_MATH
    assert gpu_kernel_class("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw") == OP_MATH
    assert gpu_kernel_class("void fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::Params)") == OP_MATH
    assert gpu_kernel_class("void splitKreduce_kernel<32, 16, int, float>(cublasSplitKParams<float>)") == OP_MATH
    assert gpu_kernel_class(ADD) == OP_MEMORY
    assert gpu_kernel_class("void at::native::elementwise_kernel<128, 2, gpu_kernel_impl<gemm_attn_conv>>") == OP_MEMORY
    assert gpu_kernel_class("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4>(float*)") == OP_MEMORY
    assert gpu_kernel_class("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(int)") == OP_MEMORY
    assert gpu_kernel_class("triton_poi_fused_add_cos_sin_0") == OP_MEMORY
    # named after the ops they fuse, or holding "mma": bandwidth-bound still (review of the session's diff)
    assert gpu_kernel_class("triton_poi_fused_convolution_relu_0") == OP_MEMORY
    assert gpu_kernel_class("triton_red_fused__scaled_dot_product_attention_2") == OP_MEMORY
    assert gpu_kernel_class("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long)"
                            ) == OP_MEMORY
    assert gpu_kernel_class("triton_tem_fused_mm_0") == OP_MATH
    assert gpu_kernel_class("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float)") == OP_MEMORY
    assert gpu_kernel_class("void cub::DeviceRadixSortOnesweepKernel<Policy800, long>(int)") == OP_MEMORY
    assert gpu_kernel_class("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, float>(int)") == OP_MATH
    assert gpu_kernel_class("my_custom_kernel") == OP_OTHER


def test_elementwise_gpu_step_is_memory_bound(tmp_path: Path) -> None:
    """Nine 100 µs elementwise adds per 1000 µs step: busy 90 %, all of it bandwidth-bound kernels. Before:
    "compute-bound, compute 90.0%" and "profile the top kernels for better algorithms (fewer, larger matmuls)"."""
    r = analyze_traces([write(tmp_path / "add.json", steps([(ADD, 10.0 + 100.0 * j, 100.0, 7) for j in range(9)]))])
    r = r["ranks"]["0"]
    assert r["temporal_breakdown"]["compute_pct"] == pytest.approx(90.0)  # HTA's kernel type: unchanged
    assert r["kernel_time"] == {"math_pct": 0.0, "bandwidth_pct": pytest.approx(90.0), "other_pct": 0.0}
    v = r["verdict"]
    assert v["bound"] == "memory-bound" and v["steps_by_bound"] == {"memory-bound": 3}
    assert "bandwidth-bound kernels" in v["reasons"][0] and "90.0%" in v["reasons"][0]
    assert v["recommendations"][0].startswith("fuse elementwise chains")
    assert not any("larger matmuls" in x or "bf16" in x for x in v["recommendations"])


def test_gemm_step_with_some_elementwise_stays_compute_bound(tmp_path: Path) -> None:
    """GEMM [0, 600) then an elementwise add [600, 900) on one stream, and an add [100, 300) on another stream
    under the GEMM: matmul 60 %, bandwidth-bound 30 % (the add under the GEMM counts as the GEMM's time)."""
    kernels = [(GEMM, 0.0, 600.0, 7), (ADD, 600.0, 300.0, 7), (ADD, 100.0, 200.0, 8)]
    r = analyze_traces([write(tmp_path / "mix.json", steps(kernels))])["ranks"]["0"]
    assert r["kernel_time"] == {"math_pct": pytest.approx(60.0), "bandwidth_pct": pytest.approx(30.0),
                                "other_pct": 0.0}
    assert r["verdict"]["bound"] == "compute-bound"


@pytest.mark.parametrize("cat", ["cpu_op", "Operator"])
def test_cpu_step_scopes_filed_as_operators(tmp_path: Path, cat: str) -> None:
    """Older torch.profiler traces file `ProfilerStep#N` and `enumerate(DataLoader)#...` with the operators. Per
    1000 µs step: the loader 300 µs (an `aten::stack` of 100 inside), two `aten::mm` of 100 µs: busy 20 %, data
    wait 30 %, the rest idle. Before: "compute-bound, idle 0.0%", ProfilerStep#1-3 the top operators."""
    def trace(scope_cat: str) -> dict:
        ev = []
        for k in range(3):
            s = 10_000.0 + 1000.0 * k
            ev += [host(f"ProfilerStep#{k + 1}", s, 1000.0, cat=scope_cat),
                   host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", s, 300.0, cat=scope_cat),
                   host("aten::stack", s + 100.0, 100.0), host("aten::mm", s + 300.0, 100.0),
                   host("aten::mm", s + 600.0, 100.0)]
        return {"schemaVersion": 1, "traceEvents": ev}

    got = analyze_traces([write(tmp_path / "old.json", trace(cat))])["ranks"]["0"]
    ref = analyze_traces([write(tmp_path / "new.json", trace("user_annotation"))])["ranks"]["0"]
    tb = got["temporal_breakdown"]
    assert tb["compute_pct"] == pytest.approx(20.0) and tb["idle_pct"] == pytest.approx(80.0)
    assert tb["data_wait_pct"] == pytest.approx(30.0)
    assert got["verdict"]["bound"] == "host-bound"  # idle 80 %, data wait 30 % < half of it
    assert [r["name"] for r in got["top_kernels"]] == ["aten::mm", "aten::stack"]
    assert tb == ref["temporal_breakdown"] and got["verdict"] == ref["verdict"]


def test_one_trace_of_two_gpus_says_each_devices_idle(tmp_path: Path) -> None:
    """One process driving two GPUs that take turns (GEMM [0, 500) on device 0, [500, 1000) on device 1): their
    union is busy the whole step, each device half of it. Before: "compute-bound, idle 0.0%" and nothing else."""
    ev: list[dict] = []
    corr = 0
    for k in range(3):
        s = 10_000.0 + 1000.0 * k
        ev.append(host(f"ProfilerStep#{k + 1}", s, 1000.0, cat="user_annotation"))
        for device, at in ((0, 0.0), (1, 500.0)):
            corr += 1
            kern = kernel(GEMM, s + at, 500.0, 7 + device, corr)
            kern["pid"], kern["args"]["device"] = device, device
            ev += [launch(s + device, corr), kern]
    r = analyze_traces([write(tmp_path / "two.json", {"schemaVersion": 1, "traceEvents": ev})])["ranks"]["0"]
    assert r["temporal_breakdown"]["idle_pct"] == pytest.approx(0.0)  # the union, as HTA's definition has it
    assert r["devices"] == [{"device": 0, "busy_pct": pytest.approx(50.0), "idle_pct": pytest.approx(50.0)},
                            {"device": 1, "busy_pct": pytest.approx(50.0), "idle_pct": pytest.approx(50.0)}]
    assert "device 0 50.0%, device 1 50.0%" in r["devices_note"]
    assert any("device 0 is idle 50.0% of the step" in x for x in r["verdict"]["reasons"])
    one = analyze_traces([write(tmp_path / "one.json", steps([(GEMM, 0.0, 500.0, 7)]))])["ranks"]["0"]
    assert "devices" not in one and "devices_note" not in one
