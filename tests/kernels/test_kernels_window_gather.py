"""The device-resident loader's Triton gather against plain indexing: the same bits, any shape (a window
wider than one program's span, features not a multiple of 16, one target, an empty batch, repeated ids),
on CUDA or under Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

from stride.kernels.runtime import triton_runs_on

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if not triton_runs_on(torch.empty(0, device=DEV)):
    pytest.skip("Triton runs on neither CUDA nor its interpreter here", allow_module_level=True)

from stride.kernels.triton_window_gather import SPAN, gather_windows  # noqa: E402


def _reference(rows, starts, targets, ids, t):  # noqa: ANN001, ANN202
    first = starts[ids]
    return torch.stack([rows[s : s + t] for s in first.tolist()]) if len(ids) else rows[:0, None].expand(0, t, -1), \
        targets[ids]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("m", "f", "t", "k", "b"), [
    (300, 32, 16, 3, 7),  # the common layout: F a multiple of 16
    (200, 5, 9, 1, 11),  # odd features, one target
    (SPAN // 4 + 50, 8, SPAN // 8 + 3, 2, 3),  # a window of more than one span
    (40, 3, 40, 4, 2),  # one window, the whole table
])
def test_gather_windows_is_plain_indexing(dtype, m, f, t, k, b, seed) -> None:  # noqa: ANN001
    rows = torch.randn(m, f, device=DEV).to(dtype)
    n = m - t + 1
    starts = torch.randperm(m - t + 1, device=DEV)[:n].sort().values  # window i starts at row starts[i]
    targets = torch.randn(n, k, device=DEV)
    ids = torch.randint(0, n, (b,), device=DEV)
    ids[0] = n - 1  # the last window: its block ends at the table's end
    x, y = gather_windows(rows, starts, targets, ids, t)
    rx, ry = _reference(rows, starts, targets, ids, t)
    assert x.shape == (b, t, f) and x.dtype == dtype and y.shape == (b, k)
    assert torch.equal(x, rx) and torch.equal(y, ry), seed


def test_empty_batch_and_bad_inputs() -> None:
    rows, starts, targets = torch.randn(10, 4, device=DEV), torch.arange(8, device=DEV), torch.randn(8, 2, device=DEV)
    x, y = gather_windows(rows, starts, targets, torch.empty(0, dtype=torch.int64, device=DEV), 3)
    assert x.shape == (0, 3, 4) and y.shape == (0, 2)
    with pytest.raises(ValueError, match="contiguous"):
        gather_windows(rows.t(), starts, targets, starts[:2], 3)
    with pytest.raises(TypeError, match="int64"):
        gather_windows(rows, starts.int(), targets, starts[:2], 3)
