"""report.html in a real headless Chromium: it loads from file:// with no console error and no network
request, and its charts are readable: every label inside its chart and clear of the others, legends
outside the data area, more than two ticks per numeric axis, rates from zero, a log2 batch axis.

Needs Debian's `chromium` and `chromium-driver` (.ci/run installs them) and selenium (dev extra);
skips, saying which is missing, elsewhere. A screenshot of the page is left in the test's tmp_path.
"""

from __future__ import annotations

import base64
import json
import math
import random
import shutil

import pytest

from stride.bench.results import make_results
from stride.cli.main import main

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")

GEOMETRY_JS = """
const box = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
return [...document.querySelectorAll('svg')].map((svg) => {
  const r = svg.getBoundingClientRect();
  const rel = (b) => [b[0] - r.left, b[1] - r.top, b[2] - r.left, b[3] - r.top];
  const q = (s) => [...svg.querySelectorAll(s)];
  const legend = svg.querySelector('.legend');
  const area = svg.querySelector('.plot-area');
  return {
    title: (svg.querySelector('text.title') || svg.querySelector('text')).textContent, width: r.width,
    height: r.height, texts: q('text').map((t) => [t.textContent, ...rel(box(t))]),
    area: area ? rel(box(area)) : null,
    legend: legend ? rel(box(legend)) : null,
    xticks: q('.tick.x text').map((t) => t.textContent),
    yticks: q('.tick.y text').map((t) => t.textContent),
    marks: q('.bar, polyline.series, circle').length,
  };
});
"""


def _entry(name: str, median: float, n: int = 3, **kw) -> dict:
    return {"name": name, "version": 1, "config": kw.pop("config", {}),
            "throughput": {"unit": "samples/s", "median": median, "min": median * 0.97, "max": median * 1.02,
                           "cv": 0.02 if n > 1 else 0.0, "n": n},
            "mfu": 0.3, "peak_mem_bytes": 300 * 2**20, "time_to_target_s": None, "run_dir": kw.pop("run_dir", None),
            "step_time_breakdown_s": {"data": 0.001, "forward": 0.02, "backward": 0.04, "optimizer": 0.005,
                                      "other": 0.002}, **kw}


def _point(strategy: str, scaling: str, n: int, tput: float) -> dict:
    """A scaling point whose efficiency is its speed-up / N, as stride writes it (results.py refuses others)."""
    return {"workload": "mlp_tiny", "strategy": strategy, "scaling": scaling, "world_size": n,
            "per_rank_batch": 256, "global_batch": 256 * n,
            "throughput": {"unit": "samples/s", "median": tput, "min": tput, "max": tput, "cv": 0.0, "n": 1},
            "speedup": tput / 8080.0, "efficiency": tput / 8080.0 / n, "exposed_comm_fraction": 0.1,
            "oversubscribed": n > 2, "cores": 2}


def _results(tmp_path) -> dict:
    """Every chart kind: breakdown, throughput per variant, a noisy loss curve, a batch sweep, a weak-scaling sweep."""
    run = tmp_path / "run"
    run.mkdir()
    rng = random.Random(0)
    lines = [json.dumps({"step": 10 * i, "loss": 1.2 + 0.4 * math.exp(-i / 15) + rng.gauss(0, 0.08),
                         "time_s": 0.05 * i}) for i in range(1, 121)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    ws = [_entry(f"mlp_tiny+bs{b}", 2000.0 * b**0.5, config={"train": {"batch_size": b}})
          for b in (16, 32, 64, 128, 256)]
    ws += [_entry("ts_transformer_tiny+baseline", 8080.0, run_dir=str(run)),
           _entry("ts_transformer_tiny+bf16", 1150.0), _entry("ts_transformer_tiny+ac_full", 6500.0, n=1)]
    ws += [_entry("mlp_tiny+n1", 8080.0, n=1, world_size=1), _entry("mlp_tiny+ddp-weak-n2", 14000.0, n=1, world_size=2)]
    pts = [_point("single", "baseline", 1, 8080.0), _point("ddp", "weak", 2, 14000.0),
           _point("ddp", "weak", 4, 16000.0)]
    return make_results("custom", {"gpus": [], "cpu_model": "AMD EPYC"}, ws,
                        {"points": pts, "pinning": {"1": "core 0"}, "repeats": 1})


def _overlap(a: list[float], b: list[float], slack: float = 0.5) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack


def test_report_is_readable_in_a_headless_browser(tmp_path, monkeypatch) -> None:
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_bin):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[dev]')")
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # the driver and browser are given: Selenium Manager fetches nothing

    (tmp_path / "results.json").write_text(json.dumps(_results(tmp_path)))
    assert main(["report", str(tmp_path)]) == 0
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(driver_bin), options=opts)
    try:
        url = (tmp_path / "report.html").as_uri()
        drv.get(url)
        charts = drv.execute_script(GEOMETRY_JS)
        cells = [td.text for td in drv.find_elements("css selector", "td")]
        shot = drv.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        (tmp_path / "report.png").write_bytes(base64.b64decode(shot["data"]))  # the whole page
        console = drv.get_log("browser")
        requests = [json.loads(m["message"])["message"] for m in drv.get_log("performance")]
    finally:
        drv.quit()

    assert [c for c in console if c["level"] in ("SEVERE", "WARNING")] == []
    sent = [m["params"] for m in requests if m["method"] == "Network.requestWillBeSent"]
    mine = {p["request"]["url"] for p in sent if p.get("documentURL") == url}
    assert mine == {url}, f"the report fetched something: {mine - {url}}"  # self-contained
    remote = {p["request"]["url"] for p in sent if p["request"]["url"].split(":")[0] in ("http", "https", "ws", "wss")}
    assert remote == set(), f"network requests during the visit: {remote}"

    for c in charts:
        assert all(t[0].strip() for t in c["texts"]), f"{c['title']}: an empty text element"
        for text, *b in c["texts"]:  # measured by the browser: nothing clipped at the chart's edges
            assert b[0] >= -0.5 and b[1] >= -0.5 and b[2] <= c["width"] + 0.5 and b[3] <= c["height"] + 0.5, (
                f"{c['title']}: {text!r} at {b} outside {c['width']}x{c['height']}")
        labels = [t for t in c["texts"] if t[0].strip()]
        for i, a in enumerate(labels):  # no label on top of another (tick labels, legend, titles)
            for b in labels[i + 1:]:
                assert not _overlap(a[1:], b[1:]), f"{c['title']}: {a[0]!r} overlaps {b[0]!r}"
        if c["legend"] is not None:
            assert not _overlap(c["legend"], c["area"], slack=0.0), f"{c['title']}: legend over the data"
        assert len(c["xticks"]) > 2 and c["marks"] > 0, c["title"]
        if "breakdown" not in c["title"] and "per variant" not in c["title"]:
            assert len(c["yticks"]) > 2, c["title"]
    by_title = {c["title"].split(" (")[0]: c for c in charts}
    assert set(by_title) == {"step-time breakdown", "ts_transformer_tiny: throughput per variant",
                             "training loss against wall time", "throughput against batch size",
                             "scaling efficiency against world size", "throughput against world size"}
    for t in ("step-time breakdown", "ts_transformer_tiny: throughput per variant"):
        assert by_title[t]["xticks"][0] == "0"  # bars start at zero
    for t in ("throughput against batch size", "throughput against world size",
              "scaling efficiency against world size"):
        assert by_title[t]["yticks"][0] == "0"
    assert by_title["throughput against batch size"]["xticks"] == ["16", "32", "64", "128", "256"]  # log2
    assert by_title["throughput against world size"]["xticks"] == ["1", "2", "4"]
    assert "10k" in by_title["ts_transformer_tiny: throughput per variant"]["xticks"]  # not 8.08e+03
    assert "cv 0.0%" not in " ".join(cells) and "0.0%" not in cells and "1 run" in cells
    assert (tmp_path / "report.png").stat().st_size > 10_000
