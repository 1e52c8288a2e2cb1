"""The README's own-data path, as a newcomer writes it (first-contact audit, session 36).

`Trainer(train_data=(X, Y))` with numpy arrays failed with `TypeError: Parallel.local_batch() takes 3 positional
arguments but 1025 were given` (the pair was iterated row by row); float64 data (numpy's default) against float32
weights said only "mat1 and mat2 must have the same dtype", and a model built for another window width "mat1 and
mat2 shapes cannot be multiplied (2x448 and 320x3)": neither named the data."""

from __future__ import annotations

import pytest
import torch

import stride
from stride.train.output_check import InputMismatchError


def _cfg(tmp_path):  # noqa: ANN001, ANN202
    return stride.load_config("configs/quickstart.toml", ["train.steps=3", "train.val_every=0", "train.threads=1"])


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, 64, 7, generator=g), torch.randn(256, 3, generator=g)


def _model(width: int = 64 * 7) -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(width, 3))


def _fit(tmp_path, data, model=None):  # noqa: ANN001, ANN202
    return stride.Trainer(model=model or _model(), train_data=data, config=_cfg(tmp_path),
                          out=tmp_path / "run").fit()


def test_numpy_arrays_train_as_the_same_tensors(tmp_path) -> None:  # noqa: ANN001
    x, y = _data()
    a = _fit(tmp_path / "a", (x, y)).summary
    b = _fit(tmp_path / "b", (x.numpy(), y.numpy())).summary
    assert b["status"] == "finished" and b["steps"] == 3
    assert b["params_sha256"] == a["params_sha256"] and b["final_train_loss"] == a["final_train_loss"]


def test_float64_data_names_the_dtypes_and_the_fix(tmp_path) -> None:  # noqa: ANN001
    x, y = _data()
    with pytest.raises(InputMismatchError) as err:
        _fit(tmp_path, (x.double().numpy(), y.double().numpy()))
    msg = str(err.value)
    assert "inputs [B, 64, 7] float64" in msg and "parameters float32" in msg and ".astype(np.float32)" in msg
    assert "mat1 and mat2 must have the same dtype" in msg  # torch's own words kept


def test_a_model_of_another_width_names_the_window(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(InputMismatchError) as err:
        _fit(tmp_path, _data(), _model(64 * 5))
    msg = str(err.value)
    assert "seq_len 64 and n_features 7" in msg and "(2x448 and 320x3)" in msg


class _Buggy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise TypeError("a bug in the model's own code")


def test_a_bug_in_the_models_code_keeps_its_own_error(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(TypeError, match="a bug in the model's own code"):
        _fit(tmp_path, _data(), _Buggy())


class _OutOfMemory(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_an_out_of_memory_on_the_first_batch_stays_one(tmp_path) -> None:  # noqa: ANN001
    """Only shape and dtype errors are the data's: an OOM read as a config error (exit 2, a sweep stopped whole,
    the launcher told of a refusal) with a window-shape hint beside it (review of the session's diff)."""
    with pytest.raises(torch.OutOfMemoryError):
        _fit(tmp_path, _data(), _OutOfMemory())
