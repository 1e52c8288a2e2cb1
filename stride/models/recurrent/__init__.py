"""Recurrent and convolutional family: LSTM, TCN and a DeepLOB-style CNN + LSTM (`model.py`), sizes (`workload.py`)."""

from stride.models.recurrent.model import DeepLOBForecaster, LSTMForecaster, TCNBlock, TCNForecaster

__all__ = ["DeepLOBForecaster", "LSTMForecaster", "TCNBlock", "TCNForecaster"]
