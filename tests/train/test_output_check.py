"""Issue 16, item 5: a model whose output does not fit the targets stops the run before its first step.

Before: a user model returning [B, 1] against targets [B, 3] trained with only torch's broadcast warning
(MSE compared every horizon with one prediction). Now set-up checks the output once, on two samples of the
first batch, with the rule of the loss in use, and says what was expected and why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from stride.config import load_config
from stride.models.losses import pinball_loss
from stride.train.output_check import OutputShapeError
from stride.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
SMALL = ["data.n_assets=2", "data.n_steps=500", "data.seq_len=16", "data.horizons=[1, 5, 20]", "train.steps=2",
         "train.batch_size=8", "train.val_every=0", "metrics.progress=false", "metrics.flops=false",
         "metrics.system_sample_s=0"]

USER_MODULE = textwrap.dedent('''
    import torch
    from torch import nn

    class OneOutput(nn.Module):
        """Forgets n_horizons: one prediction per window."""
        def __init__(self, n_features, seq_len, outputs=1):
            super().__init__()
            self.lin = nn.Linear(n_features * seq_len, outputs)
        def forward(self, x):
            return self.lin(x.flatten(1))

    def build(n_features, seq_len, n_horizons):
        return OneOutput(n_features, seq_len)

    def build_right(n_features, seq_len, n_horizons):
        return OneOutput(n_features, seq_len, n_horizons)
''')


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "shape_user_model.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _fit(*overrides: str, **kw) -> dict:
    return Trainer(config=load_config(overrides=[*SMALL, *overrides]), write_run_dir=False, **kw).fit().summary


def test_a_user_model_with_one_output_for_three_horizons_is_stopped(user_module: Path, tmp_path: Path) -> None:
    with pytest.raises(OutputShapeError) as err:
        _fit("model.name=shape_user_model:build")
    msg = str(err.value)
    assert "OneOutput returned [B, 1]" in msg and "model.loss = 'mse' needs [B, 3]" in msg
    assert "the targets are [B, 3] (3 horizons: data.horizons = [1, 5, 20])" in msg
    with pytest.raises(OutputShapeError, match=r"needs \[B, 3, 3\] \(one output per horizon and quantile level"):
        _fit("model.name=shape_user_model:build", "model.loss=quantile")
    assert _fit("model.name=shape_user_model:build_right")["steps"] == 2  # the right shape trains


def test_stride_train_says_it_in_one_line_and_writes_no_run_folder(user_module: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    from stride.cli.main import main

    out = tmp_path / "run"  # the command in this process (a subprocess would add seconds of imports)
    rc = main(["train", str(REPO / "configs/quickstart.toml"), "--out", str(out), "--set",
               "model.name=shape_user_model:build", "--set", "data.n_steps=512", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and "returned [B, 1]" in last and "needs [B, 3]" in last, err
    assert not out.exists()


def pairs(n: int, h: int, features: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """The caller's own data: windows [n, 16, features] and targets of `h` horizons."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 16, features, generator=g), torch.randn(n, h, generator=g)


def test_a_registered_workload_on_data_with_other_targets_is_stopped() -> None:
    """The transformer is built for [data]'s 3 horizons; the caller's data has 2 target columns."""
    from stride.data.build import build_data

    features = build_data(load_config(overrides=SMALL).data, 8).n_features
    with pytest.raises(OutputShapeError, match=r"TimeSeriesTransformer returned \[B, 3\] .* needs \[B, 2\]: the "
                                               r"targets are \[B, 2\]"):
        _fit("model.size=tiny", train_data=pairs(64, 2, features))
    assert _fit("model.size=tiny", "model.loss=quantile")["steps"] == 2  # [B, 3, 3]: what quantile needs


class Flat(nn.Module):
    def __init__(self, outputs: tuple[int, ...]) -> None:
        super().__init__()
        self.outputs = outputs
        self.lin = nn.Linear(16 * 5, int(torch.tensor(outputs).prod()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.flatten(1)).view(len(x), *self.outputs)


def test_a_user_loss_is_checked_on_what_it_gets() -> None:
    """A caller's loss has its own contract: only what torch would broadcast silently is refused."""
    def mse(p, y):
        return ((p - y) ** 2).mean()

    with pytest.raises(OutputShapeError, match=r"Flat returned \[B, 1\] .* targets are \[B, 3\].* broadcasts"):
        _fit(model=Flat((1,)), train_data=pairs(64, 3), loss_fn=mse)
    q = torch.tensor([0.1, 0.5, 0.9])
    s = _fit(model=Flat((3, 3)), train_data=pairs(64, 3), loss_fn=lambda p, y: pinball_loss(p, y, q))
    assert s["steps"] == 2  # [B, 3, 3] against [B, 3]: another rank, the loss's own business


def test_the_check_leaves_the_training_stream_alone() -> None:
    """The check's forward (eval mode, forked RNG) does not change what is trained: same loss as without it."""
    import stride.train.trainer as tr

    with_check = _fit("model.size=tiny", "model.dropout=0.2", "train.deterministic=true")
    original = tr.check_output
    try:
        tr.check_output = lambda *a, **k: None
        without = _fit("model.size=tiny", "model.dropout=0.2", "train.deterministic=true")
    finally:
        tr.check_output = original
        torch.use_deterministic_algorithms(False)
    assert with_check["params_sha256"] == without["params_sha256"]


@pytest.mark.slow
@pytest.mark.dist
def test_under_pipeline_parallelism_every_rank_stops_with_the_message(tmp_path: Path) -> None:
    """pp=2: only the last stage sees the output in training; the check runs on the whole model first, on every
    rank, so the job ends at once with the message (no rank left waiting for a stage that stopped)."""
    (tmp_path / "pp_bad_model.py").write_text(textwrap.dedent('''
        from torch import nn
        from user_model import UserForecaster

        def build(n_features, seq_len, n_horizons):
            model = UserForecaster(n_features, n_horizons, 16, 2)
            model.readout = nn.Linear(16, 1)  # one output, whatever n_horizons is
            return model
    '''))
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "tests" / "parallel")])}
    cmd = [sys.executable, "-m", "stride", "train", str(REPO / "configs/quickstart.toml"), "--nproc", "2",
           "--set", "parallel.pp=2", "--set", "model.name=pp_bad_model:build", "--set", "train.threads=1",
           "--set", "data.n_steps=600", "--set", "data.seq_len=16", "--no-progress", "--out", str(tmp_path / "run")]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=240)
    assert res.returncode != 0
    assert res.stderr.count("UserForecaster returned [B, 1]") >= 2, res.stderr[-3000:]  # both ranks said it
