"""`stride bench`'s advice: low MFU is overhead, not 'compute-bound: try bf16'; a precision is advised
only where it measured faster (the results' own variants, this host's probe, or a GPU's datasheet);
the probe's figures are kept per host."""

from __future__ import annotations

import json

from stride.bench.results import make_results
from stride.metrics import dtype_speed
from stride.metrics.dtype_speed import DtypeSpeeds
from stride.report.recommend import recommend


def _w(name: str, median: float, precision: str = "fp32", mfu: float = 0.05) -> dict:
    return {"name": name, "version": 1, "config": {"train": {"precision": precision}},
            "throughput": {"unit": "samples/s", "median": median, "min": median * 0.99, "max": median * 1.01,
                           "cv": 0.01},
            "mfu": mfu, "peak_mem_bytes": 2**20, "time_to_target_s": None, "run_dir": None,
            "step_time_breakdown_s": {"data": 0.01, "forward": 0.3, "backward": 0.6, "optimizer": 0.05, "other": 0.04}}


def test_a_variant_measured_slower_is_never_advised() -> None:
    """The tradeoff sweep ran bf16 at 0.6x fp32's speed: before, the advice said 'try bf16' anyway."""
    res = make_results("tradeoffs-sweep", {"gpus": []}, [_w("m+baseline", 1000.0), _w("m+bf16", 600.0, "bf16")])
    (r,) = recommend(res, {}, speeds=None)
    assert r["bottleneck"] == "overhead (low MFU)"
    assert "torch.compile" in r["advice"] and "keep fp32: in bf16 this workload's step measured slower" in r["advice"]
    assert "try bf16" not in r["advice"] and "use bf16" not in r["advice"]


def test_a_variant_measured_faster_is_advised_with_its_figure() -> None:
    res = make_results("tradeoffs-sweep", {"gpus": []}, [_w("m", 1000.0, mfu=0.5), _w("m+bf16", 1500.0, "bf16", 0.5)])
    (r,) = recommend(res, {}, speeds=None)
    assert r["bottleneck"] == "compute" and "use bf16 autocast: this workload's step measured 1.50x" in r["advice"]


def test_precision_advice_by_machine() -> None:
    gpu = make_results("quick", {"gpus": ["NVIDIA H100 80GB HBM3"]}, [_w("m", 1000.0, mfu=0.5)])
    assert "use bf16 autocast (tensor cores" in recommend(gpu, {}, speeds=None)[0]["advice"]
    cpu = make_results("quick", {"gpus": []}, [_w("m", 1000.0, mfu=0.5)])
    assert "bf16" not in recommend(cpu, {}, speeds=None)[0]["advice"]  # a CPU nobody measured: no advice
    slow = DtypeSpeeds({"fp32": 1e11, "bf16": 9e8, "fp16": 3e8}, "matmul")
    advice = recommend(cpu, {}, speeds=slow)[0]["advice"]
    assert "keep fp32" in advice and "autocast" not in advice


def test_probe_figures_are_kept_per_host(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dtype_speed, "_MEMO", {})
    got = dtype_speed.measured_dtype_flops(seconds=0.01)
    kept = json.loads((tmp_path / "dtype_flops.json").read_text())
    key = dtype_speed.host_key()
    assert kept[key] == got and set(got) == {"fp32", "bf16", "fp16"} and all(v > 0 for v in got.values())
    kept[key] = {"fp32": 1.0, "bf16": 2.0, "fp16": 3.0}  # a later process reads the kept figures
    (tmp_path / "dtype_flops.json").write_text(json.dumps(kept))
    monkeypatch.setattr(dtype_speed, "_MEMO", {})
    assert dtype_speed.measured_dtype_flops() == {"fp32": 1.0, "bf16": 2.0, "fp16": 3.0}
