"""Outside audit 20: hostile names and values from a config file or --set on their way to the run folder's path, the
terminal, Prometheus, MLflow and W&B.

Each is either refused when the config is loaded (a ConfigError naming the key and what is wrong) or used safely
where the sink is written. Before the fixes: a 300-byte `train.name` failed at mkdir ("File name too long", no key
named); C1 controls (`\\x9b`, the 8-bit CSI) and bidirectional overrides passed `train.name`; a NUL in
`metrics.out_dir` was a ValueError traceback ("embedded null byte"); `metrics.mlflow_experiment` of 600 characters was
an MlflowException traceback from MLflow's validation after the run folder was made; a W&B project of 129 characters
a wandb UsageError; `metrics.prometheus_host` = ".." a UnicodeError traceback from the idna codec and a host that does
not resolve "Name or service not known" naming no key, each leaving a run folder with only system.jsonl in it; an
MLflow param over 6000 characters was cut by MLflow's client with only a log warning; an ESC in `metrics.out_dir`
reached the terminal raw in the "run directory:" line.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # tiny_run
from fault_helpers import stride_main  # noqa: E402
from tiny_run import MLP_TINY_TOML  # noqa: E402

from stride.config import load_config  # noqa: E402
from stride.config.errors import ConfigError  # noqa: E402

REFUSED = [
    ("train.name", "a" * 300, "bytes"),  # past a file name's 255 with the stamp: mkdir's ENAMETOOLONG before
    ("train.name", "\U0001F600" * 60, "bytes"),  # 60 characters, 240 bytes
    ("train.name", "x\x9by", "control"),  # C1 CSI: acts like ESC [ on some terminals
    ("train.name", "\u202eexe.txt", "bidirectional"),  # shows as "txt.exe"
    ("metrics.out_dir", "runs\x00x", "NUL"),
    ("checkpoint.dir", "ck\x00pt", "NUL"),
    ("metrics.mlflow_experiment", "e" * 501, "500"),
    ("metrics.mlflow_experiment", "a\nb", "control"),
    ("metrics.mlflow_experiment", "a\x1b[31mred", "control"),
    ("metrics.mlflow_tracking_uri", "file:/tmp/x\x1b]0;t\x07", "control"),
    ("metrics.wandb_project", "p" * 129, "128"),
    ("metrics.wandb_project", "a\x1bb", "control"),
    ("metrics.wandb_name", "a\x1b]0;pwned\x07", "control"),
    ("metrics.wandb_name", "a\nb", "control"),
    ("metrics.prometheus_host", "../../x", "host name"),
    ("metrics.prometheus_host", "h" * 300, "host name"),
]


def _toml_string(value: str) -> str:
    """`value` as a TOML basic string (every control character as \\uXXXX), for --set."""
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in value) + '"'


@pytest.mark.parametrize("key, value, says", REFUSED, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(REFUSED)])
def test_a_hostile_name_is_refused_at_load_naming_the_key(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[f"{key}={_toml_string(value)}"])
    msg = str(err.value)
    assert f"`{key}`" in msg and says in msg, msg
    assert len(msg) < 700, f"the message repeats the whole value: {len(msg)} characters"
    assert "\x1b" not in msg and "\x00" not in msg and "\n" not in msg, repr(msg)


HTMLISH = "ok \U0001F600 \u05e9\u05dc\u05d5\u05dd \u200f<img src=x onerror=alert(1)>"  # emoji, Hebrew, RLM, HTML


@pytest.mark.parametrize("key, value", [("train.name", HTMLISH),
                                        ("train.name", "a" * 200),
                                        ("metrics.mlflow_experiment", "e" * 500),
                                        ("metrics.wandb_project", "p" * 128),
                                        ("metrics.prometheus_host", "::1")])
def test_names_within_the_limits_still_load(key: str, value: str) -> None:
    cfg = load_config(overrides=[f"{key}={_toml_string(value)}"])
    section, name = key.split(".")
    assert getattr(getattr(cfg, section), name) == value


def test_a_10k_value_is_named_in_a_short_message(tmp_path: Path) -> None:
    """The whole of `stride train`: exit 2, one line, no traceback, the key named, the value not printed whole."""
    (tmp_path / "c.toml").write_text(MLP_TINY_TOML)
    res = stride_main("train", str(tmp_path / "c.toml"), "--set", f"metrics.out_dir={tmp_path / 'runs'}",
                      "--set", f'train.name="{"n" * 10_000}"')
    assert res.code == 2 and "Traceback" not in res.err, res.err[-2000:]
    assert "`train.name`" in res.err and len(res.err) < 1000, res.err[:2000]
    assert not (tmp_path / "runs").exists()  # refused before any folder was made


def _fake_trainer():
    from types import SimpleNamespace

    return SimpleNamespace(run_dir=None)


@pytest.mark.parametrize("host", ["..", "nonexistent.invalid"])
def test_prometheus_host_that_cannot_bind_is_named(host: str) -> None:
    pytest.importorskip("prometheus_client", reason="the `observe` extra is not installed")
    from stride.metrics.observe.prometheus import PrometheusCallback

    cb = PrometheusCallback(host=host, port=0)  # what the schema lets through (".." is a host-name pattern)
    with pytest.raises(ConfigError, match=r"`metrics\.prometheus_host` = '") as err:
        cb.on_fit_start(_fake_trainer())
    assert "cannot serve /metrics" in str(err.value)


def test_a_refused_observer_leaves_no_run_folder_behind(tmp_path: Path) -> None:
    """A busy port: the run is refused naming the key, and the folder it made goes (it held only system.jsonl)."""
    pytest.importorskip("prometheus_client", reason="the `observe` extra is not installed")
    (tmp_path / "c.toml").write_text(MLP_TINY_TOML)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = stride_main("train", str(tmp_path / "c.toml"), "--set", f"metrics.out_dir={tmp_path / 'runs'}",
                          "--set", "metrics.prometheus=true", "--set", f"metrics.prometheus_port={port}",
                          "--set", "metrics.system_sample_s=0.05")
    assert res.code == 2 and "Traceback" not in res.err, res.err[-2000:]
    assert "metrics.prometheus_port" in res.err and "already in use" in res.err, res.err
    assert list((tmp_path / "runs").iterdir()) == []


def test_the_run_directory_line_shows_an_escape_as_text(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(MLP_TINY_TOML)
    out_dir = tmp_path / "a\x1b[31mRED\x1b]0;title\x07"
    res = stride_main("train", str(tmp_path / "c.toml"), "--set", f"metrics.out_dir={_toml_string(str(out_dir))}")
    assert res.code == 0, res.err[-2000:]
    line = next(ln for ln in res.out.splitlines() if ln.startswith("run directory:"))
    assert "\x1b" not in line and "\x07" not in line and "\\x1b[31mRED" in line, repr(line)
    assert len(list(out_dir.iterdir())) == 1  # the folder itself is named as configured


def test_an_mlflow_param_over_its_limit_says_it_was_cut_and_the_whole_is_logged(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="the `mlflow` extra is not installed (pip install -e '.[mlflow]')")
    import os

    from mlflow import MlflowClient

    from stride.train.trainer import Trainer

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    long_dir = "d" * 7000  # checkpoint.dir is logged as a param whether or not checkpoints are on
    uri = (tmp_path / "store").resolve().as_uri()
    cfg = load_config(overrides=["model.name=mlp", "model.size=tiny", "data.n_assets=2", "data.n_steps=400",
                                 "data.seq_len=8", "data.horizons=[1]", "train.steps=2", "train.batch_size=8",
                                 "train.val_every=0", "metrics.progress=false", "metrics.flops=false",
                                 "metrics.system_sample_s=0", "metrics.mlflow=true",
                                 f'metrics.mlflow_tracking_uri="{uri}"', f'checkpoint.dir="{long_dir}"'])
    summary = Trainer(config=cfg, out=tmp_path / "run").fit().summary
    client = MlflowClient(tracking_uri=uri)
    logged = client.get_run(summary["mlflow_run_id"]).data.params["checkpoint.dir"]
    assert len(logged) <= 6000 and logged.startswith("d" * 1000)
    assert "cut: 7000 characters" in logged and "config.toml" in logged, logged[-200:]
    whole = Path(client.download_artifacts(summary["mlflow_run_id"], "config.toml", str(tmp_path / "dl")))
    assert f'dir = "{long_dir}"' in whole.read_text()
