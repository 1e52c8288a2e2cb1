"""Recurrent and convolutional sequence models: LSTM, TCN, and a DeepLOB-style CNN + LSTM."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stride.models.plan import ParallelPlan


def _head(width: int, n_horizons: int, n_quantiles: int) -> nn.Linear:
    return nn.Linear(width, n_horizons * max(n_quantiles, 1))


def _shape(out: torch.Tensor, n_horizons: int, n_quantiles: int) -> torch.Tensor:
    return out.view(out.shape[0], n_horizons, n_quantiles) if n_quantiles else out


class LSTMForecaster(nn.Module):
    """Stacked LSTM over the window; the last hidden state predicts every horizon.

    `blocks` holds one single-layer LSTM per layer (rather than one multi-layer nn.LSTM) so that
    activation checkpointing and pipeline splits can address layers; cuDNN fuses each layer alike.
    """

    parallel_plan = ParallelPlan(blocks="blocks")  # pipeline stages, checkpointing; no tensor parallel

    def __init__(self, n_features: int, n_horizons: int, *, hidden: int = 64, n_layers: int = 2,
                 dropout: float = 0.0, n_quantiles: int = 0) -> None:
        super().__init__()
        self.n_horizons, self.n_quantiles, self.dropout = n_horizons, n_quantiles, dropout
        self.inp = nn.Linear(n_features, hidden)
        self.blocks = nn.ModuleList(LSTMLayer(hidden) for _ in range(n_layers))
        self.head = _head(hidden, n_horizons, n_quantiles)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = F.dropout(block(h), self.dropout, self.training)
        return _shape(self.head(h[:, -1]), self.n_horizons, self.n_quantiles)


class LSTMLayer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(width, width, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.lstm(x)[0]  # residual: stacks train as easily as the transformer's blocks


class TCNBlock(nn.Module):
    """Two dilated causal convolutions with a residual connection (Bai et al., 2018)."""

    def __init__(self, width: int, kernel: int, dilation: int, dropout: float) -> None:
        super().__init__()
        self.pad = (kernel - 1) * dilation
        self.conv1 = nn.Conv1d(width, width, kernel, dilation=dilation)
        self.conv2 = nn.Conv1d(width, width, kernel, dilation=dilation)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        h = F.relu(self.conv1(F.pad(x, (self.pad, 0))))
        h = F.dropout(h, self.dropout, self.training)
        h = self.conv2(F.pad(h, (self.pad, 0)))
        return F.relu(x + h)


class TCNForecaster(nn.Module):
    """Temporal convolutional network: causal (left-padded) convolutions dilated 1, 2, 4, ..., two per block, give a
    receptive field of 1 + 2 (k - 1)(2^L - 1) steps (61 for the 4 blocks of `tiny`, k = 3); the head reads the last."""

    parallel_plan = ParallelPlan(blocks="blocks")  # pipeline stages, checkpointing; no tensor parallel

    def __init__(self, n_features: int, n_horizons: int, *, width: int = 64, n_layers: int = 4,
                 kernel: int = 3, dropout: float = 0.0, n_quantiles: int = 0) -> None:
        super().__init__()
        self.n_horizons, self.n_quantiles = n_horizons, n_quantiles
        self.inp = nn.Conv1d(n_features, width, 1)
        self.blocks = nn.ModuleList(TCNBlock(width, kernel, 2**i, dropout) for i in range(n_layers))
        self.head = _head(width, n_horizons, n_quantiles)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x.transpose(1, 2))
        for block in self.blocks:
            h = block(h)
        return _shape(self.head(h[:, :, -1]), self.n_horizons, self.n_quantiles)


class InceptionLite(nn.Module):
    """DeepLOB's inception module, reduced: parallel 1x1, 3x1 and pooled branches over time."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.b1 = nn.Conv2d(ch, ch, (1, 1))
        self.b3 = nn.Sequential(nn.Conv2d(ch, ch, (1, 1)), nn.LeakyReLU(0.01),
                                nn.Conv2d(ch, ch, (3, 1), padding=(1, 0)))
        self.bp = nn.Sequential(nn.MaxPool2d((3, 1), stride=1, padding=(1, 0)), nn.Conv2d(ch, ch, (1, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([F.leaky_relu(b(x), 0.01) for b in (self.b1, self.b3, self.bp)], dim=1)


class DeepLOBForecaster(nn.Module):
    """CNN + LSTM in the style of DeepLOB (Zhang et al., 2019) over order-book-like features.

    Convolutions first combine neighbouring feature columns (price/size pairs, then levels), then
    run over time; an LSTM reads the resulting sequence. It forecasts from the whole window, as DeepLOB does:
    the 3-step convolutions and pooling over time are centred (zero padding on both ends), two deep, so a step's
    features inside the window read up to two steps ahead; only the window's last step is forecast from, where the
    right padding is zeros, so nothing after the window enters (tests/foundation/test_models.py). Works on any
    [B, T, F] input; it is meant for F = 4 x levels columns of an L2 book (ask price, ask size, bid price, bid size
    per level).
    """

    parallel_plan = ParallelPlan(blocks="blocks")  # pipeline stages, checkpointing; no tensor parallel

    def __init__(self, n_features: int, n_horizons: int, *, channels: int = 16, hidden: int = 64,
                 n_quantiles: int = 0) -> None:
        super().__init__()
        self.n_horizons, self.n_quantiles = n_horizons, n_quantiles
        c = channels
        self.conv = nn.Sequential(
            nn.Conv2d(1, c, (1, 2), stride=(1, 2)), nn.LeakyReLU(0.01),
            nn.Conv2d(c, c, (3, 1), padding=(1, 0)), nn.LeakyReLU(0.01),
            nn.Conv2d(c, c, (1, (n_features + n_features % 2) // 2)), nn.LeakyReLU(0.01),  # -> width 1
        )
        self.inception = InceptionLite(c)
        self.blocks = nn.ModuleList([nn.LSTM(3 * c, hidden, batch_first=True)])
        self.head = _head(hidden, n_horizons, n_quantiles)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, f = x.shape
        if f % 2:
            x = F.pad(x, (0, 1))
        h = self.inception(self.conv(x.unsqueeze(1)))  # [B, 3c, T, 1]
        seq = h.squeeze(-1).transpose(1, 2)  # [B, T, 3c]
        out, _ = self.blocks[0](seq)
        return _shape(self.head(out[:, -1]), self.n_horizons, self.n_quantiles)
