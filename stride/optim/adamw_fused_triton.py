"""AdamW whose step is one Triton launch per parameter group (on CUDA), with an exact torch path.

Why: `torch.optim.AdamW(foreach=True)` launches several kernels per tensor list and `fused=True` one
per dtype/device bucket but a fixed grid per tensor; this applies the update to all tensors of a group
in one launch with fp32 moments even for bf16 parameters. Without a GPU (or for CPU tensors) the step
goes through torch's own functional AdamW (fp32 parameters: bitwise the same as torch.optim.AdamW)
or an fp32 torch update (bf16/fp16 parameters), so state dicts move freely between the two paths.
DTensor parameters (FSDP2, TP) work: AdamW is elementwise, so each rank updates its local shard.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.optim.adam import adam as torch_adam

from stride.kernels.runtime import notice_once, triton_runs_on
from stride.optim.dtensor import is_dtensor
from stride.optim.state import KeepStateDtypes, RecordsPath, StateSpec, check_betas, check_hyperparameters

IMPLS = ("auto", "triton", "torch")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if is_dtensor(t) else t


def _local_grad(p: torch.Tensor) -> torch.Tensor:
    """This rank's part of `p`'s gradient, laid out as `p` is. Under tensor parallelism with sequence parallel a
    replicated weight (a norm's) gets a `Partial(sum)` gradient, each rank holding only its own term: updated from
    that, the replicas drifted apart (8.4e-4 after 5 steps at tp = 2, against 0.0 with torch's AdamW, whose DTensor
    ops reduce it). So the gradient is first brought to the parameter's placements (the reduction)."""
    g = p.grad
    if is_dtensor(g) and is_dtensor(p) and tuple(g.placements) != tuple(p.placements):
        g = g.redistribute(p.device_mesh, p.placements)
    return _local(g)


class FusedAdamW(RecordsPath, KeepStateDtypes, torch.optim.Optimizer):
    """AdamW (decoupled weight decay, Adam bias correction), fp32 moments, one launch per group.

    impl: "auto" (Triton where the tensors allow, else torch), "triton" (Triton; torch with a notice
    where it cannot run), "torch" (always the torch path).
    """

    _group_keys_foreign = frozenset({"clip_threshold", "momentum_dtype"})  # Adafactor's

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        impl: str = "auto",
    ) -> None:
        if impl not in IMPLS:
            raise ValueError(f"FusedAdamW: impl={impl!r} is not one of {', '.join(IMPLS)}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        self._check_group(defaults, "")
        defaults["betas"] = tuple(betas)
        self.impl = impl
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str) -> None:
        """The constructor's checks, for its defaults and for every param group (given, added or loaded)."""
        check_hyperparameters("FusedAdamW", group["lr"], group["eps"], group["weight_decay"], where)
        check_betas("FusedAdamW", group["betas"], where)

    def _state_spec(self, p: torch.Tensor, group: dict[str, Any]) -> StateSpec:
        return {k: (tuple(p.shape), torch.float32, True) for k in ("exp_avg", "exp_avg_sq")}

    def _init_state(self, p: torch.Tensor) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            buckets: dict[tuple, list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedAdamW does not support sparse gradients")
                state = self._init_state(p)
                key = (p.device, p.dtype, p.grad.dtype, int(state["step"].item()) + 1)
                buckets.setdefault(key, []).append(p)
            for (_, _, _, step), ps in buckets.items():
                self._update(group, ps, step)
        return loss

    def _update(self, group: dict[str, Any], ps: list[torch.Tensor], step: int) -> None:
        beta1, beta2 = group["betas"]
        lr, wd, eps = float(group["lr"]), group["weight_decay"], group["eps"]
        p_l = [_local(p) for p in ps]
        g_l = [_local_grad(p) for p in ps]
        m_l = [_local(self.state[p]["exp_avg"]) for p in ps]
        v_l = [_local(self.state[p]["exp_avg_sq"]) for p in ps]
        steps = [self.state[p]["step"] for p in ps]
        use_triton = self.impl != "torch" and triton_runs_on(*p_l[:1])
        if self.impl == "triton" and not use_triton:
            notice_once(
                "fused-adamw-torch",
                f"stride.optim: optim.name='adamw_triton' (FusedAdamW) needs CUDA tensors (or TRITON_INTERPRET=1) "
                f"for its Triton step, these are on {p_l[0].device.type}; using the torch AdamW path instead",
            )
        use_triton = use_triton and all(t.is_contiguous() for t in p_l + g_l + m_l + v_l)
        self._record("triton" if use_triton else "torch")
        if use_triton:
            for s in steps:
                s += 1
            from stride.optim.triton_adamw_kernel import adamw_multi_tensor

            adamw_multi_tensor(
                p_l, g_l, m_l, v_l, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=wd, step=step
            )
        elif ps[0].dtype == torch.float32 and g_l[0].dtype == torch.float32:
            torch_adam(  # increments the step tensors itself
                p_l, g_l, m_l, v_l, [], steps, foreach=None, decoupled_weight_decay=True, amsgrad=False,
                beta1=beta1, beta2=beta2, lr=lr, weight_decay=wd, eps=eps, maximize=False,
            )
        else:
            for s in steps:
                s += 1
            _fp32_update(p_l, g_l, m_l, v_l, lr, beta1, beta2, eps, wd, step)


def _fp32_update(p_l, g_l, m_l, v_l, lr, beta1, beta2, eps, wd, step) -> None:
    """AdamW in fp32 for low-precision parameters, the same formula as the kernel."""
    bc1, bc2 = 1.0 - beta1**step, 1.0 - beta2**step
    for p, g, m, v in zip(p_l, g_l, m_l, v_l, strict=True):
        pf, gf = p.float(), g.float()
        pf.mul_(1.0 - lr * wd)
        m.lerp_(gf, 1.0 - beta1)
        v.mul_(beta2).addcmul_(gf, gf, value=1.0 - beta2)
        pf.addcdiv_(m, v.sqrt().div_(bc2**0.5).add_(eps), value=-lr / bc1)
        p.copy_(pf)
