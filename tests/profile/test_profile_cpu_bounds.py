"""CPU traces: what bounds the operators, where data loading goes, and data wait nobody measured.

Audit 5, on CPU traces with known bottlenecks:
- F1: `DistributedDataParallel.forward` matched the data-annotation pattern ("data" anywhere), so a Python-heavy
  forward under DDP read "data-bound, 56%, raise num_workers" while the same model without DDP read host-bound.
- F2: every CPU operator was compute, so a pointwise chain on 64 MB tensors (bandwidth-bound: 4.8 GB/s against a
  6.6 GB/s copy) was "compute-bound" with bf16 advice, which autocast cannot honour for pointwise ops.
- F3: the data loader's torch ops on the training thread were compute: 99.3 % of the step in
  `DataLoader.__next__` read "compute-bound".
- F4: a step loading data without a DataLoader or annotation read "data wait 0.0%", as if measured.
- F6: a data-bound step with operators at 6 % of it was told to fuse its small kernels.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from synth import host, kernel, launch, write  # noqa: E402

from stride.metrics.dtype_speed import DtypeSpeeds  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.classify import OP_CLASS_NAMES, cpu_op_class, is_data_annotation  # noqa: E402
from stride.profile.render import render_report  # noqa: E402

FAST_BF16 = DtypeSpeeds({"fp32": 1e11, "bf16": 3.6e11}, "matmul")  # the audit host's matmul probe: bf16 3.6x
DDP_FWD = "DistributedDataParallel.forward"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def step(dur: float, *events: dict) -> dict:
    return {"schemaVersion": 1, "traceEvents": [host("ProfilerStep#1", 0, dur, cat="user_annotation"), *events]}


def analyse(tmp_path: Path, trace: dict, speeds: DtypeSpeeds | None = None) -> dict:
    rep = analyze_traces([write(tmp_path / "t.json", trace)], dtype_speeds=(lambda t: speeds) if speeds else None)
    return rep["ranks"]["0"]


# -- F1: which annotations are data loading ----------------------------------------------------------------------

@pytest.mark.parametrize(("name", "data"), [
    (DDP_FWD, False), ("DataParallel.forward", False), ("## all2all_data:kjt lengths ##", False),
    ("## all2all_tw_data:init ##", False), ("metadata", False), ("stride.forward", False),
    (LOADER, True), ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", True), ("stride.data", True),
    ("## data_load ##", True), ("## data ##", True), ("load_batch", True), ("wait_for_batch", True),
    ("fetch_data", True),
])
def test_data_annotations_by_whole_words(name: str, data: bool) -> None:
    assert is_data_annotation(name) is data


def python_heavy_forward(wrapper: str | None) -> dict:
    """A 1000 µs step: a forward [0,700) of ten 10 µs linears 70 µs apart (Python between them), under `wrapper`
    where given; a backward of 250 µs of matmuls. Idle 650 µs: 600 inside the forward, 50 after the backward."""
    ev = [host("aten::linear", 70.0 * k, 10) for k in range(10)] + [host("aten::mm", 700, 250)]
    if wrapper:
        ev.insert(0, host(wrapper, 0, 700, cat="user_annotation"))
    return step(1000, *ev)


def test_a_ddp_forward_is_not_data_loading(tmp_path: Path) -> None:
    """The audit's s2d: the same Python-heavy model, plain and in DDP, is host-bound both ways (DDP read
    data-bound with 56 % data wait)."""
    plain, ddp = (analyse(tmp_path, python_heavy_forward(w)) for w in (None, DDP_FWD))
    assert (plain["verdict"]["bound"], ddp["verdict"]["bound"]) == ("host-bound", "host-bound")
    for r in (plain, ddp):
        assert r["temporal_breakdown"]["idle_pct"] == pytest.approx(65.0)
        assert r["temporal_breakdown"]["data_wait_pct"] is None  # no data annotation: not measured (F4)
    assert {a["name"] for a in ddp["annotations"]} == {DDP_FWD}
    with_loader = python_heavy_forward(DDP_FWD)
    with_loader["traceEvents"].append(host(LOADER, 950, 20, cat="user_annotation"))  # idle [950,970) in the loader
    r = analyse(tmp_path, with_loader)
    assert r["temporal_breakdown"]["data_wait_pct"] == pytest.approx(2.0)  # the loader's 20 µs, not the forward's
    assert r["verdict"]["bound"] == "host-bound"


def test_a_gpu_gap_under_a_ddp_forward_is_host_wait(tmp_path: Path) -> None:
    """GPU: a 60 µs gap inside DDP's forward whose next kernel the host launched late is host wait, not data wait
    (with the 10 µs before the first kernel, launched late too: all 70 µs of idle)."""
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"), host(DDP_FWD, 0, 90, cat="user_annotation"),
          launch(5, 1), launch(75, 2), kernel("volta_sgemm", 10, 10, 7, 1), kernel("volta_sgemm", 80, 20, 7, 2)]
    r = analyze_traces([write(tmp_path / "g.json", {"traceEvents": ev})])["ranks"]["0"]
    assert r["temporal_breakdown"]["data_wait_pct"] == 0.0  # GPU figures keep their form: measured as 0
    assert r["idle_breakdown"]["host_wait_pct"] == pytest.approx(100.0)
    assert r["verdict"]["bound"] == "host-bound"


def test_a_real_ddp_trace_of_a_python_heavy_forward_is_not_data_bound(tmp_path: Path) -> None:
    """A real torch.profiler trace: a Python-heavy model in DDP (gloo, world size 1) in this process."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layers = layers

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                for layer in self.layers:
                    x = layer(x)
                    sum(range(100_000))  # Python work between operators
                return x

        model = torch.nn.parallel.DistributedDataParallel(Net())
        x = torch.randn(1, 8)
        trace = profiled(tmp_path, lambda: model(x).sum().backward())
    finally:
        dist.destroy_process_group()
    r = analyze_traces([trace])["ranks"]["0"]
    ddp = {a["name"]: a["pct_of_step"] for a in r["annotations"]}.get(DDP_FWD, 0.0)
    assert ddp > 30  # the forward holds most of the idle time
    assert r["verdict"]["bound"] == "host-bound" and r["temporal_breakdown"]["data_wait_pct"] is None


# -- F2: bandwidth-bound operators --------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "cls"), [
    ("aten::mm", "math"), ("aten::addmm", "math"), ("aten::linear", "math"), ("aten::convolution_backward", "math"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "math"), ("aten::mul", "bandwidth"),
    ("aten::add_", "bandwidth"), ("aten::relu", "bandwidth"), ("aten::threshold_backward", "bandwidth"),
    ("aten::copy_", "bandwidth"), ("aten::cat", "bandwidth"), ("aten::sum", "bandwidth"),
    ("aten::native_layer_norm", "bandwidth"), ("aten::_softmax", "bandwidth"), ("aten::_foreach_add_", "bandwidth"),
    ("torch::distributed::reducer::mul_out", "bandwidth"), ("aten::view", "other"), ("aten::t", "other"),
    ("aten::randn", "other"), ("autograd::engine::evaluate_function: MulBackward0", "other"),
    ("MulBackward0", "other"), ("Torch-Compiled Region: 0/0", "compiled"),
    ("## Call CompiledFxGraph fhyxjufguh5ve3gug54gxrg7v34rvsseackddsbrk27nq64jxm7p ##", "compiled"),
])
def test_operator_classes(name: str, cls: str) -> None:
    assert OP_CLASS_NAMES[cpu_op_class(name)] == cls


def pointwise_chain() -> dict:
    """The audit's s4 in miniature: a 1000 µs step of pointwise ops on big tensors (90 %), under autograd wrappers
    in backward, and 50 µs of idle."""
    ev = [host("aten::mul", 0, 200), host("aten::add", 200, 150), host("aten::relu", 350, 150),
          host("autograd::engine::evaluate_function: MulBackward0", 500, 250), host("MulBackward0", 505, 240),
          host("aten::mul", 510, 230), host("aten::threshold_backward", 750, 200)]
    return step(1000, *ev)


def test_a_pointwise_chain_is_memory_bound_without_bf16(tmp_path: Path) -> None:
    r = analyse(tmp_path, pointwise_chain(), FAST_BF16)
    tb, ot, v = r["temporal_breakdown"], r["operator_time"], r["verdict"]
    assert ot["bandwidth_pct"] == pytest.approx(93.0) and ot["math_pct"] == 0.0
    assert ot["other_pct"] == pytest.approx(2.0)  # the wrappers' own 5 + 5 + 5 + 5 µs
    assert tb["exposed_memory_pct"] == pytest.approx(93.0) and tb["compute_pct"] == pytest.approx(2.0)
    assert tb["idle_pct"] == pytest.approx(5.0)
    assert v["bound"] == "memory-bound" and "bandwidth-bound operators" in v["reasons"][0]
    recs = " ".join(v["recommendations"])
    assert "torch.compile" in recs and "bf16 autocast" not in recs and "larger matmuls" not in recs
    assert "autocast does not" in recs  # narrower storage is named, and why autocast is not it


def test_a_matmul_step_keeps_its_precision_advice(tmp_path: Path) -> None:
    r = analyse(tmp_path, step(1000, host("aten::linear", 0, 900), host("aten::addmm", 5, 890),
                               host("aten::add_", 900, 50)), FAST_BF16)
    v = r["verdict"]
    assert r["operator_time"]["math_pct"] == pytest.approx(90.0)  # addmm and linear's own 10 µs
    assert v["bound"] == "compute-bound" and v["recommendations"][0].startswith("bf16 autocast may help")
    assert "larger matmuls" in " ".join(v["recommendations"])


def test_compute_without_matmuls_gets_no_matmul_advice(tmp_path: Path) -> None:
    """A compiled pointwise graph (the audit's s8 chain): its inside is not in the trace, so it stays compute and is
    said so, with no bf16 and no "larger matmuls"."""
    r = analyse(tmp_path, step(1000, host("Torch-Compiled Region: 0/0", 0, 900), host("CompiledFunction", 2, 896),
                               host("aten::add_", 900, 50)), FAST_BF16)
    v = r["verdict"]
    assert r["operator_time"]["compiled_pct"] == pytest.approx(90.0)
    assert v["bound"] == "compute-bound"
    recs = " ".join(v["recommendations"])
    assert "compiled graphs" in recs and "enable_kernel_profile" in recs
    assert "bf16 autocast" not in recs and "fewer, larger matmuls" not in recs


def test_a_compiled_graph_that_shows_its_kernels_is_classed_by_them(tmp_path: Path) -> None:
    """With inductor's kernel profiling on, the fused C++ kernel and the extern matmul inside the region are in the
    trace: each instant goes to them, and only the region's own remainder stays "compiled"."""
    r = analyse(tmp_path, step(1000, host("Torch-Compiled Region: 0/0", 0, 900),
                               host("graph_0_cpp_fused_mul_relu_0", 10, 690), host("aten::mm", 700, 190)))
    ot = r["operator_time"]
    assert (ot["bandwidth_pct"], ot["math_pct"], ot["compiled_pct"]) == pytest.approx((69.0, 19.0, 2.0))
    assert r["verdict"]["bound"] == "memory-bound"


# -- F3: the data loader's operators -------------------------------------------------------------------------------

def loader_step() -> dict:
    """The audit's s1 cpu: the loader runs avg_pool2d [10,880) inside `DataLoader.__next__` [0,900) on the training
    thread; the model's mm [900,990). Another thread's add [100,150) during loading is not the loader's."""
    return step(1000, host(LOADER, 0, 900, cat="user_annotation"), host("aten::avg_pool2d", 10, 870),
                host("aten::mm", 900, 90), host("aten::addmm", 100, 50, tid=2))


def test_the_loaders_operators_are_data_time(tmp_path: Path) -> None:
    r = analyse(tmp_path, loader_step(), FAST_BF16)
    tb, ot, v = r["temporal_breakdown"], r["operator_time"], r["verdict"]
    assert ot["data_loading_pct"] == pytest.approx(87.0)
    assert tb["compute_pct"] == pytest.approx(14.0)  # mm 90 and the other thread's 50 (under the loader's time)
    assert tb["data_wait_pct"] == pytest.approx(85.0)  # the loader's 900 µs less the other thread's 50
    assert v["bound"] == "data-bound" and "data loader's operators (87.0% of the step)" in v["reasons"][0]
    assert "bf16" not in " ".join(v["recommendations"])
    kinds = {k["name"]: k["kind"] for k in r["top_kernels"]}
    assert kinds == {"aten::avg_pool2d": "data loading", "aten::mm": "compute", "aten::addmm": "compute"}


def test_a_real_dataloader_doing_torch_work_is_data_bound(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Augment(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1000

        def __getitem__(self, i: int) -> torch.Tensor:
            img = torch.randn(128, 128)
            for _ in range(4):
                img = torch.nn.functional.avg_pool2d(img[None, None], 3, 1, 1)[0, 0].clamp(-2, 2)
            return img[:8, 0].contiguous()

    it = iter(torch.utils.data.DataLoader(Augment(), batch_size=16))
    model = torch.nn.Linear(8, 1)
    r = analyze_traces([profiled(tmp_path, lambda: model(next(it)).sum().backward())])["ranks"]["0"]
    assert r["verdict"]["bound"] == "data-bound"
    assert r["temporal_breakdown"]["data_wait_pct"] > 50 and r["operator_time"]["data_loading_pct"] > 30


# -- F4, F6 ---------------------------------------------------------------------------------------------------------

def test_unannotated_data_loading_is_not_shown_as_measured(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A generator that sleeps: 95 % of the step with no operator and no annotation (the audit's s1 gen)."""
    rep = analyze_traces([write(tmp_path / "g.json", step(1000, host("aten::mm", 950, 50)))])
    r = rep["ranks"]["0"]
    assert r["temporal_breakdown"]["data_wait_pct"] is None and r["idle_breakdown"]["data_wait_pct"] is None
    assert r["per_step"][0]["temporal_breakdown"]["data_wait_pct"] is None
    v = r["verdict"]
    assert v["bound"] == "host-bound" and "waiting for data not measured" in v["reasons"][0]
    assert "enumerate(DataLoader)" in v["reasons"][0] and "stride.data" in v["reasons"][0]
    assert any("record_function('data')" in rec for rec in v["recommendations"])
    render_report(rep)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "host-bound" in line and "│" in line)
    assert "0.0%" not in row.split("│")[-3] and "-" in row.split("│")[-3]  # the data wait column
    assert "data wait not measured" in out


def tiny_ops(n: int = 200, t0: float = 0.0) -> list[dict]:
    return [host("aten::add_", t0 + 4.0 * k, 3.0) for k in range(n)]


def test_no_fusion_note_where_the_small_kernels_do_not_matter(tmp_path: Path) -> None:
    """Data-bound, the operators 6 % of the step: the loader sets the pace, so no "fuse small kernels" note (it was
    added whatever the bound). A host-bound step whose small operators take a tenth of it keeps the note."""
    data_bound = step(10_000, host("## data_load ##", 0, 9_000, cat="user_annotation"), *tiny_ops(200, 9_100),
                      host("aten::mm", 9_900, 50))
    r = analyse(tmp_path, data_bound)
    assert r["verdict"]["bound"] == "data-bound" and r["tiny_kernels"]["flagged"]
    assert not any("fuse small kernels" in rec for rec in r["verdict"]["recommendations"])
    host_bound = step(10_000, *tiny_ops(250), host("aten::mm", 1_000, 5_000))
    r = analyse(tmp_path, host_bound)
    assert r["verdict"]["bound"] == "host-bound" and r["tiny_kernels"]["flagged"]
    assert any("fuse small kernels" in rec for rec in r["verdict"]["recommendations"])


# -- real traces ------------------------------------------------------------------------------------------------

def profiled(tmp_path: Path, step_fn: Callable[[], object]) -> Path:
    """One trace of `step_fn` under torch.profiler (CPU, wait 1, warmup 1, active 3), as a user would record it."""
    from torch.profiler import ProfilerActivity, profile, schedule

    out = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(5):
            step_fn()
            prof.step()
    return out


def test_real_pointwise_and_matmul_steps(tmp_path: Path) -> None:
    """The same profiler on a pointwise chain over 4M floats (memory-bound, no bf16 advice) and on a 1024x1024 matmul
    chain (compute-bound, the matmul probe's advice). At 512 the chain took a few milliseconds a step on a 2-core
    Xeon with AVX-512 (family 6 model 207) under a loaded CI run, and one scheduler gap between its matmuls read as
    a host-bound step (33.5% of the step with no operator)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    x, b = torch.randn(1 << 22), torch.randn(1 << 22)

    def chain() -> torch.Tensor:
        y = x * 1.01
        for _ in range(3):
            y = torch.relu(y * 1.01 + b)
        return y

    (tmp_path / "pw").mkdir()
    pw = analyze_traces([profiled(tmp_path / "pw", chain)], dtype_speeds=lambda t: FAST_BF16)["ranks"]["0"]
    assert pw["verdict"]["bound"] == "memory-bound", pw["verdict"]
    assert "bf16 autocast" not in " ".join(pw["verdict"]["recommendations"])
    a, w = torch.randn(1024, 1024), torch.randn(1024, 1024)
    (tmp_path / "mm").mkdir()
    mm = analyze_traces([profiled(tmp_path / "mm", lambda: a @ w @ w @ w)],
                        dtype_speeds=lambda t: FAST_BF16)["ranks"]["0"]
    assert mm["verdict"]["bound"] == "compute-bound", mm["verdict"]
    assert mm["verdict"]["recommendations"][0].startswith("bf16 autocast may help")


SLOW_BF16_STEP = DtypeSpeeds({"fp32": 978.5, "bf16": 538.2}, "workload")  # the step itself: bf16 0.55x fp32
FAST_BF16_STEP = DtypeSpeeds({"fp32": 978.5, "bf16": 1278.5}, "workload")  # 1.31x


def test_a_memory_bound_step_gets_its_measured_precision(tmp_path: Path) -> None:
    """First-contact audit: a memory-bound CPU step was always told to try a narrower dtype, also where `stride
    profile` had measured this workload's step at 0.55x fp32 in bf16, and not told to use bf16 where it measured
    1.31x. The measured line now stands where the generic one did."""
    for sub in ("slow", "fast", "probe"):
        (tmp_path / sub).mkdir()
    slow = analyse(tmp_path / "slow", pointwise_chain(), SLOW_BF16_STEP)["verdict"]
    assert slow["bound"] == "memory-bound"
    recs = " ".join(slow["recommendations"])
    assert "keep fp32" in recs and "narrower dtype" not in recs
    fast = analyse(tmp_path / "fast", pointwise_chain(), FAST_BF16_STEP)["verdict"]
    recs = " ".join(fast["recommendations"])
    assert "bf16 autocast: this workload's step measured 1.31x" in recs and "narrower dtype" not in recs
    assert "torch.compile" in recs  # the rest of the memory-bound advice stays
    matmul_only = analyse(tmp_path / "probe", pointwise_chain(), FAST_BF16)["verdict"]  # a matmul probe: no answer
    assert "narrower dtype" in " ".join(matmul_only["recommendations"])
