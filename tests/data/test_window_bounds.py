"""Window sources refuse windows outside what they were built for (audit 37: look-ahead and leakage).

Each series makes a leak visible as a number: the feature of row r is r itself, so a window's last feature is its
end row, and a window that reads past its split (or another asset's rows) shows it in its values.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stride.data.windows import ArrayWindows, RowWindows

N, T = 60, 8


def _rows() -> tuple[torch.Tensor, torch.Tensor]:
    """Features [N, 2]: the row number and its square root; a price column exp(0.01 r) (log returns 0.01 a row)."""
    r = torch.arange(N, dtype=torch.float32)
    return torch.stack([r, r.sqrt()], 1), torch.exp(0.01 * r.double()).float()


def test_gather_run_refuses_windows_past_its_split() -> None:
    """A train source (ends 7..29) asked for 10 windows from end 25 handed out ends 25..34: the last five read rows
    of the validation split (ends 40..49 here) and the embargo before it, and their targets rows up to 37."""
    feats, price = _rows()
    train = RowWindows(feats, price, np.array([[T - 1, 30]]), T, [1, 3])
    x, y = train.gather_run(25, 5)  # the source's last five windows: allowed, equal to the window gather
    xg, yg = train.gather(torch.arange(30 - T + 1 - 5, 30 - T + 1))
    assert torch.equal(x, xg) and torch.allclose(y, yg)
    assert x[:, -1, 0].tolist() == [25.0, 26.0, 27.0, 28.0, 29.0]
    with pytest.raises(IndexError, match=r"rows 25\.\.34 are not all windows of this source \(the last window of its "
                                         r"run ends at row 29"):
        train.gather_run(25, 10)
    two = RowWindows(feats, price, np.array([[T - 1, 20], [30, 40]]), T, [1])
    with pytest.raises(IndexError, match="row 22 is no window end of this source"):  # between its runs
        two.gather_run(22, 2)
    with pytest.raises(IndexError, match=r"rows 18\.\.31 are not all"):  # across the gap between two runs
        two.gather_run(18, 14)
    # the same runs given in the other order (the review: a search over sorted starts refused 32..34)
    rev = RowWindows(feats, price, np.array([[30, 40], [T - 1, 20]]), T, [1])
    x, _ = rev.gather_run(32, 3)
    assert x[:, -1, 0].tolist() == [32.0, 33.0, 34.0]
    with pytest.raises(IndexError, match="row 22 is no window end of this source"):
        rev.gather_run(22, 2)
    assert two.gather_run(30, 10)[0][:, -1, 0].tolist() == list(map(float, range(30, 40)))


def test_ranges_whose_targets_leave_the_table_are_refused() -> None:
    """Ends up to the last row: the targets of the last three windows were read from memory after the price column
    (the kernel has no bound check): -0.49 and -0.48 where no return exists. Now refused when the source is made."""
    feats, price = _rows()
    with pytest.raises(ValueError, match=r"a window ending at row 59 reads its target at row 62 .* end rows must be "
                                         r"< 57"):
        RowWindows(feats, price, np.array([[T - 1, N]]), T, [1, 3])
    with pytest.raises(ValueError, match="would start at row -2"):
        RowWindows(feats, price, np.array([[5, 20]]), T, [1])
    with pytest.raises(ValueError, match="must be positive"):  # a 'target' inside the window
        RowWindows(feats, price, np.array([[T - 1, 20]]), T, [-1])
    ok = RowWindows(feats, price, np.array([[T - 1, N - 3]]), T, [1, 3])  # the last end whose target exists
    _, y = ok.gather(torch.tensor([len(ok) - 1]))
    np.testing.assert_allclose(y.numpy() / ok.target_scale.numpy(), [[0.01, 0.03]], rtol=1e-4)


def test_array_windows_never_take_another_assets_rows_as_history() -> None:
    """The [A, N, F] series is one flat table: a window of asset 1 ending at t=1 read asset 0's last two rows
    (values 18, 19) as its history. Now its ends are checked."""
    a, n, t = 2, 20, 4
    feats = (torch.arange(a)[:, None, None] * 1000.0 + torch.arange(n)[None, :, None]).float()
    targets = torch.zeros(a, n, 1)
    with pytest.raises(ValueError, match=r"t in \[seq_len - 1 = 3, 20\)\); got assets 0\.\.1, t 1\.\.19"):
        ArrayWindows(feats, targets, np.array([[1, 1], [0, 19]]), t)
    with pytest.raises(ValueError, match="asset in"):
        ArrayWindows(feats, targets, np.array([[2, 5]]), t)
    w = ArrayWindows(feats, targets, np.array([[1, 3], [0, 19]]), t)
    x, _ = w.gather(torch.arange(2))
    assert x[:, :, 0].tolist() == [[1000.0, 1001.0, 1002.0, 1003.0], [16.0, 17.0, 18.0, 19.0]]


def test_a_target_from_each_bars_open_is_said(tmp_path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    """Daily bars whose close is the open moved by a known amount: with target_column = Open, the h=1 target
    log O[e+1] - log O[e] is the window's own last log close/open when the next open equals the close (a market
    without overnight gaps), so a model reads it off the window. Said in one warning; the close gives none."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stride.config import load_config
    from stride.data.ingest import ingest
    from stride.data.splits import build_store_sources

    n = 120
    rng = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(0.01 * rng.standard_normal(n)))
    opn = np.concatenate([[100.0], close[:-1]])  # each open is the previous close: no overnight gap
    days = np.datetime64("2024-01-02", "ns") + np.arange(n).astype("timedelta64[D]")
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"timestamp": days, "Open": opn, "Close": close}), tmp_path / "src" / "X.parquet")
    ingest(tmp_path / "src", tmp_path / "st")

    def source(target: str):  # noqa: ANN202
        cfg = load_config(overrides=['data.source="store"', f'data.store="{tmp_path / "st"}"', "data.seq_len=5",
                                     "data.horizons=[1]", "data.cross_days=true", 'data.normalize="none"',
                                     f'data.target_column="{target}"']).data
        return build_store_sources(cfg).val

    caplog.clear()
    val = source("Open")
    x, y = val.gather(torch.arange(len(val)))
    seen = (np.log(x[:, -1, 1].double().numpy()) - np.log(x[:, -1, 0].double().numpy())) * float(val.target_scale[0])
    np.testing.assert_allclose(y[:, 0].numpy(), seen, rtol=1e-4, atol=1e-5)  # the target is in the window
    assert "target column 'Open'" in caplog.text and "looks like each bar's open" in caplog.text
    caplog.clear()
    source("Close")
    assert "looks like each bar's open" not in caplog.text
