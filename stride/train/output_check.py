"""Before training: does the model's output fit the targets the loss will compare it with?

A model returning [B, 1] against targets [B, 3] trained with only torch's broadcast warning: the loss
compared every horizon with one prediction. The trainer calls `check_output` once in set-up, on two
samples of the first batch, before any layout is applied: every rank runs the whole model there (under
pipeline parallelism only the last stage sees the output during training), so every rank reaches the
same verdict and a bad model stops the run before its first step, on all ranks alike.

What fits depends on the loss:
- `[model] loss` (mse, huber; fused or not): the output has the targets' shape, [B, H];
  quantile: [B, H, Q], one output per horizon and `model.quantiles` level.
- a loss the caller gives (`Trainer(loss_fn=...)`) or the model's own (`model.loss`): its contract is
  its own, so only what torch would silently broadcast is refused: an output of the targets' rank
  with another shape ([B, 1] against [B, 3]).
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from stride.config.errors import ConfigError
from stride.config.schema import RunConfig

SAMPLES = 2  # two, not one: a model that drops or reduces the batch dimension shows it


class OutputShapeError(ConfigError):
    """The model's output does not fit the targets (the message says what was expected, and why)."""


class InputMismatchError(ConfigError):
    """The model failed on the first batch's inputs (the message says what it was given, and torch's error)."""


# torch's words for inputs a layer cannot take (a matmul's, a conv's, a norm's, a cat's or a view's shapes; dtypes)
MISMATCH_WORDS = ("shapes cannot be multiplied", "size mismatch", "must match the size", "expected input",
                  "to have", "dimension", "shape", "must have the same dtype", "expected scalar type",
                  "expected both inputs", "found dtype")


def mismatched_input(model: nn.Module, xs: torch.Tensor, exc: RuntimeError) -> bool:
    """Whether a RuntimeError of the first forward is about the inputs' shape or dtype (then InputMismatchError, a
    config error: the data or the model must change), not an out-of-memory, a device's or a collective's error, which
    stay what they are (a sweep fails that class, a launcher reads a crash)."""
    if isinstance(exc, torch.OutOfMemoryError) or type(exc).__name__ in ("DistBackendError", "DistError",
                                                                            "AcceleratorError"):
        return False
    return any(w in str(exc).lower() for w in MISMATCH_WORDS)


def input_mismatch(model: nn.Module, xs: torch.Tensor, exc: BaseException) -> str:
    """What a model that failed on its first batch was given, beside torch's message: the batch's shape and dtype
    against the model's parameters' dtype. A float64 numpy array (numpy's default) against float32 weights said
    only "mat1 and mat2 must have the same dtype", a window of the wrong width "mat1 and mat2 shapes cannot be
    multiplied (2x448 and 320x3)" (first-contact audit): neither named the data."""
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.is_floating_point()})
    x_dtype = str(xs.dtype).removeprefix("torch.")
    shape = "[B, " + ", ".join(str(d) for d in xs.shape[1:]) + "]" if xs.dim() else "[]"
    hint = ""
    if xs.is_floating_point() and dtypes and x_dtype not in dtypes:
        hint = (f"; the inputs are {x_dtype} and the model's parameters {'/'.join(dtypes)}: give {dtypes[0]} data "
                f"(a tensor's .to(torch.{dtypes[0]}), a numpy array's .astype(np.{dtypes[0]}))")
    elif xs.dim() == 3:
        hint = (f"; a model gets windows [B, seq_len, n_features], here seq_len {xs.shape[1]} and n_features "
                f"{xs.shape[2]}: build it for those (a `module:factory` model is called with seq_len= and n_features=)")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    frames = [f for f in traceback.extract_tb(exc.__traceback__)  # the model's own code's last line, if any
              if f"{os.sep}torch{os.sep}" not in f.filename and f.filename != __file__]
    at = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return (f"{type(model).__name__} failed on the first batch, inputs {shape} {x_dtype}: "
            f"{type(exc).__name__}: {first}{at}{hint}")


def _shape(shape: Sequence[int], batch: int) -> str:
    dims = ["B" if i == 0 and d == batch else str(d) for i, d in enumerate(shape)]
    return "[" + ", ".join(dims) + "]"


def _targets_why(cfg: RunConfig, y: torch.Tensor) -> str:
    """Where the targets' last dimension comes from, when [data] says it."""
    h = cfg.data.horizons
    if y.dim() == 2 and y.shape[-1] == len(h):
        return f" ({len(h)} horizons: data.horizons = {list(h)})"
    return ""


def expected_output(cfg: RunConfig, named: str | None, y: torch.Tensor) -> list[int] | None:
    """The output shape `[model] loss` needs for targets `y`; None for a loss that is not stride's."""
    if named is None:
        return None
    if named == "quantile":
        return [*y.shape, len(cfg.model.quantiles)]
    return list(y.shape)


def check_output(model: nn.Module, loss_fn: Callable[..., Any], cfg: RunConfig, x: torch.Tensor, y: torch.Tensor,
                 autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext) -> None:
    """Run `model` on the first SAMPLES samples of (x, y) (eval mode, no grad, RNG untouched); OutputShapeError
    if its output cannot be what the loss compares with y. `loss_fn.stride_loss` names a `[model] loss`."""
    n = min(SAMPLES, len(x))
    xs, ys = x[:n], y[:n]
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []), torch.no_grad(), autocast():
            out = model(xs)
    except RuntimeError as exc:  # torch's shape and dtype errors: its own words, with what the batch was; any other
        # error (out of memory, a collective's, the model's own TypeError) keeps its traceback and its kind
        if not mismatched_input(model, xs, exc):
            raise
        raise InputMismatchError(input_mismatch(model, xs, exc)) from exc
    finally:
        model.train(was_training)
    named = getattr(loss_fn, "stride_loss", None)
    model_name = type(model).__name__
    if not isinstance(out, torch.Tensor):
        if named is not None:
            raise OutputShapeError(f"{model_name} returned a {type(out).__name__}; model.loss = {named!r} needs a "
                                   f"tensor of shape {_shape(expected_output(cfg, named, ys) or [], n)}")
        return  # a loss of the caller's or the model's own reads whatever the model returns
    got, want = list(out.shape), expected_output(cfg, named, ys)
    targets = f"the targets are {_shape(ys.shape, n)}{_targets_why(cfg, ys)}"
    if want is not None:
        if got != want:
            q = (f" (one output per horizon and quantile level, model.quantiles = {list(cfg.model.quantiles)})"
                 if named == "quantile" else "")
            silent = " (torch would broadcast the two and train on the wrong values)" if _broadcasts(got, want) else ""
            raise OutputShapeError(
                f"{model_name} returned {_shape(got, n)} for a batch of B samples, but model.loss = {named!r} needs "
                f"{_shape(want, n)}{q}: {targets}{silent}; make the model's output layer return {_shape(want, n)} "
                "(a `module:factory` model is called with n_horizons=)")
        return
    if out.dim() == ys.dim() and got != list(ys.shape) and _broadcasts(got, list(ys.shape)):
        raise OutputShapeError(
            f"{model_name} returned {_shape(got, n)} for a batch of B samples and the loss gets it with targets of "
            f"another shape: {targets}. torch broadcasts the two silently, so the loss would compare the wrong "
            f"values; return {_shape(ys.shape, n)} from the model (or reshape in the loss)")


def _broadcasts(a: list[int], b: list[int]) -> bool:
    try:
        torch.broadcast_shapes(torch.Size(a), torch.Size(b))
    except RuntimeError:
        return False
    return True
