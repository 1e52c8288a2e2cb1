"""Optimizers by name from `[optim]`, with the implementation choice (foreach / fused / for-loop).

`fused` AdamW has a CPU kernel in torch >= 2.4 and is ~5x faster than foreach there (FACTS.md);
`auto` picks fused for AdamW on CPU and CUDA, foreach for SGD. stride's own optimizers
(`adamw_triton`, `adamw8bit`, `adafactor`, in this package) are imported only when chosen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import torch

from stride.config.errors import ConfigError, suggest
from stride.config.schema import OptimConfig
from stride.kernels.compile_cache import isolate_inductor_cache

OptimizerBuilder = Callable[[Iterable[torch.nn.Parameter], OptimConfig, float | torch.Tensor], torch.optim.Optimizer]


def _impl_kwargs(cfg: OptimConfig, name: str) -> dict[str, bool]:
    impl = cfg.impl
    if impl == "auto":
        impl = "fused" if name == "adamw" else "foreach"
    # torch's SGD has a fused kernel on CPU and CUDA too (torch >= 2.4); it was refused here as "not available"
    return {"foreach": impl == "foreach", "fused": impl == "fused"}


def _adamw(params, cfg: OptimConfig, lr):
    return torch.optim.AdamW(
        params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay, **_impl_kwargs(cfg, "adamw")
    )


def _sgd(params, cfg: OptimConfig, lr):
    return torch.optim.SGD(
        params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, **_impl_kwargs(cfg, "sgd")
    )


def _adamw_triton(params, cfg: OptimConfig, lr):
    from stride.optim.adamw_fused_triton import FusedAdamW

    # One Triton launch over all parameters on GPU; the exact torch path elsewhere. impl="triton": the name asks
    # for Triton, so a fallback says so once, as `train.kernels = "triton"` does.
    return FusedAdamW(params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay,
                      impl="triton")


def _adamw8bit(params, cfg: OptimConfig, lr):
    from stride.optim.adamw8bit import AdamW8bit

    # Block-wise quantised moments: about 2 bytes of state per parameter instead of 8.
    return AdamW8bit(params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


def _adafactor(params, cfg: OptimConfig, lr):
    from stride.optim.adafactor import Adafactor

    # Factored second moments: O(rows + cols) state per matrix.
    return Adafactor(params, lr=lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)


TORCH_IMPL_OPTIMIZERS = ("adamw", "sgd")  # the optimizers `optim.impl` selects an implementation of

OPTIMIZERS: dict[str, OptimizerBuilder] = {
    "adamw": _adamw, "sgd": _sgd, "adamw_triton": _adamw_triton, "adamw8bit": _adamw8bit, "adafactor": _adafactor,
}


def build_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimConfig, *, tensor_lr: bool = False
) -> torch.optim.Optimizer:
    """`tensor_lr` keeps lr in a tensor so a compiled step does not recompile when the schedule moves it."""
    if cfg.name not in OPTIMIZERS:
        raise ConfigError(
            f"`optim.name` = {cfg.name!r} is not an optimizer{suggest(cfg.name, list(OPTIMIZERS))}; "
            f"optimizers are {', '.join(OPTIMIZERS)}"
        )
    if cfg.impl != "auto" and cfg.name not in TORCH_IMPL_OPTIMIZERS:
        # stride's own optimizers have one step each (their Triton or torch path is chosen by the device): a torch
        # implementation asked of them was ignored, and summary.json's `optimizer_impl` then disagreed with the config
        raise ConfigError(
            f"`optim.impl` = {cfg.impl!r} chooses torch's implementation of {' or '.join(TORCH_IMPL_OPTIMIZERS)}; "
            f"`optim.name` = {cfg.name!r} has its own step: leave `optim.impl` = 'auto'"
        )
    lr: float | torch.Tensor = torch.tensor(cfg.lr) if tensor_lr else cfg.lr
    return OPTIMIZERS[cfg.name](params, cfg, lr)


def optimizer_impl(optimizer: torch.optim.Optimizer) -> str | None:
    """Which implementation the steps ran (summary.json `optimizer_impl`): a Triton optimizer's path ("triton",
    "torch"; None before a step), else torch's "fused", "foreach" or "for-loop". Why: a name or `optim.impl`
    is a request that can fall back (adamw_triton without a GPU, `auto`), and a result should say what ran."""
    if hasattr(optimizer, "impl_used"):  # stride.optim.state.RecordsPath
        return optimizer.impl_used
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    if group.get("fused"):
        return "fused"
    return "foreach" if group.get("foreach") else "for-loop"


class _DropOptimizerRangeNote(logging.Filter):
    """Drops Dynamo's "Profiler record function ... will be ignored" line, printed once on the first compiled step:
    the range it means is torch.optim's own `Optimizer.step#...` annotation, which a compiled step cannot keep; a
    `stride profile` trace still has the step as `stride.optimizer` (audit 12 F9: it read as a fault on the
    README's first compile command). Other Dynamo warnings pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Profiler record function")


_RANGE_NOTE = _DropOptimizerRangeNote()


# optimizers whose step torch.compile does not compile, and why (the error's words). Adafactor reads each tensor's step
# count and the lr as Python numbers (graph breaks), so dynamo recompiled per parameter, hit its recompile limit with
# 26 warning lines, and the compiled step ran slower than eager (quick start: 3.2 vs 2.6 ms a step). AdamW8bit's step
# is `torch.compiler.disable`d for the same reason (5.8 s a step recompiling against 5.7 ms eager): it ran eager while
# summary.json said model+optimizer (outside audit of the efficiency switches).
UNCOMPILED_STEP_OPTIMIZERS: dict[str, str] = {
    "adafactor": "graph breaks on its per-tensor step count; slower than eager",
    "adamw8bit": "it is excluded from torch.compile, whose tracing recompiled it every step, and runs eager",
}


def check_compiled_step(optim_name: str, compile_mode: str) -> None:
    """`train.compile` = "model+optimizer" with an optimizer whose step does not compile: a ConfigError."""
    if compile_mode == "model+optimizer" and optim_name in UNCOMPILED_STEP_OPTIMIZERS:
        raise ConfigError(
            f"`train.compile` = 'model+optimizer' with `optim.name` = {optim_name!r}: its step does not compile "
            f"({UNCOMPILED_STEP_OPTIMIZERS[optim_name]}); use `train.compile` = 'model'"
        )
    if compile_mode == "model+optimizer" and optim_name == "adamw_triton":
        from stride.kernels.runtime import interpreter_enabled, triton_available

        if interpreter_enabled() and triton_available():  # its Triton step runs in the interpreter, which dynamo
            # cannot trace (an InterpreterError traceback at the first step); on a GPU the kernel compiles
            raise ConfigError(
                "`train.compile` = 'model+optimizer' with `optim.name` = 'adamw_triton' under TRITON_INTERPRET=1: "
                "torch.compile cannot trace the Triton interpreter; use `train.compile` = 'model'"
            )


def compiled_step(optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    """optimizer.step compiled with inductor: fuses the per-parameter update into few kernels."""
    isolate_inductor_cache()
    log = logging.getLogger("torch._dynamo.variables.ctx_manager")
    if _RANGE_NOTE not in log.filters:
        log.addFilter(_RANGE_NOTE)

    @torch.compile(fullgraph=False)
    def step() -> None:
        optimizer.step()

    return step
