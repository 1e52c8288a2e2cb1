"""AdamW with block-wise 8-bit moments: about 2 bytes of state per parameter instead of 8.

Each moment is split into blocks of 256 values, stored as 256 one-byte codes and 4 bytes per block
(2.03 bytes per value for both moments). The codes (`adamw8bit_codes`, state format 2) were chosen by
measured drift from fp32 AdamW (docs/kernels.md): sqrt(v) on a logarithmic grid fitted to each block's
range, and m stored as the normalised update m / (sqrt(v_hat) + eps) in int8. The update is computed
in fp32 from the decoded moments; only storage is 8-bit. Tensors smaller than `min_8bit_size` keep fp32
moments (their state is negligible and they are often norms/biases).

The step is multi-tensor: per parameter group (and step count) the quantised tensors go through one
Triton launch on CUDA (`triton_adamw8bit_kernel`), or, on the torch path, are gathered into one
[blocks, 256] buffer so the block-wise math runs once per step instead of once per tensor; the small
fp32-moment tensors are gathered the same way. State stays one set of tensors per parameter (the
format `state_dict` saves and checkpoints store), and both paths give the same codes (tests). State
dicts of format 1 (e4m3, before this format) are converted on load (adamw8bit_format1.py); other
formats are refused.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from stride.kernels.runtime import notice_once, triton_runs_on
from stride.optim.adamw8bit_codes import (
    BLOCK,
    Q_KEYS,
    STATE_FORMAT,
    Scratch,
    decode_m,
    decode_sqrt_v,
    encode_sqrt_v,
    encode_update,
    zero_q8_state,
)
from stride.optim.adamw8bit_format1 import checkpoint_template, upgrade_state_dict
from stride.optim.dtensor import reject_dtensor
from stride.optim.state import (
    KeepStateDtypes,
    RecordsPath,
    StateSpec,
    check_betas,
    check_hyperparameters,
)

IMPLS = ("auto", "triton", "torch")


@dataclass(frozen=True)
class _Hyper:
    """One step's scalars; torch turns Python scalars into fp32 operands, and so does the kernel."""

    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    step: int

    @property
    def bc1(self) -> float:
        return 1.0 - self.beta1**self.step

    @property
    def bc2_sqrt(self) -> float:
        return (1.0 - self.beta2**self.step) ** 0.5

    @property
    def prev_bc2_sqrt(self) -> float:
        """The previous step's, with which the stored u was normalised (any value at step 1: u = 0)."""
        return (1.0 - self.beta2 ** (self.step - 1)) ** 0.5 if self.step > 1 else 1.0


def q8_update(g: torch.Tensor, state: dict[str, torch.Tensor], h: _Hyper, scratch: Scratch | None = None,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """Block-wise step on [blocks, BLOCK] views: updates the codes in place, returns the update
    direction (before -lr): `out`, else scratch "m" (valid until the next call), else a new tensor.
    Padding in the last block has g = 0, so both moments stay 0 there."""
    r = decode_sqrt_v(state["exp_avg_sqrt_grid_codes"], state["exp_avg_sqrt_grid_bounds"], scratch)
    m = decode_m(state["exp_avg_normed_codes"], state["exp_avg_normed_scale"], r, h.prev_bc2_sqrt, h.eps, scratch)
    v = r.mul_(r)
    m.lerp_(g, 1.0 - h.beta1)
    v.mul_(h.beta2).addcmul_(g, g, value=1.0 - h.beta2)
    r = v.sqrt_()
    encode_sqrt_v(r, state["exp_avg_sqrt_grid_codes"], state["exp_avg_sqrt_grid_bounds"], scratch)
    # (m / bc1) / (r / bc2_sqrt + eps) as m / (r * (bc1 / bc2_sqrt) + bc1 * eps): one pass fewer
    den = r.mul_(h.bc1 / h.bc2_sqrt).add_(h.bc1 * h.eps)
    update = m.div_(den) if out is None else torch.div(m, den, out=out)
    encode_update(update, h.bc1, state["exp_avg_normed_codes"], state["exp_avg_normed_scale"], scratch)
    return update


def f32_update(g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, h: _Hyper) -> torch.Tensor:
    """Plain AdamW moments in fp32 (small tensors), same formula as q8_update."""
    m.lerp_(g, 1.0 - h.beta1)
    v.mul_(h.beta2).addcmul_(g, g, value=1.0 - h.beta2)
    return torch.div(m, h.bc1).div_(v.sqrt().div_(h.bc2_sqrt).add_(h.eps))


def _apply(params: list[torch.Tensor], updates: list[torch.Tensor], h: _Hyper) -> None:
    """p = p * (1 - lr * wd) - lr * update; fp32 parameters in two foreach calls, others through fp32."""
    decay = 1.0 - h.lr * h.weight_decay
    f32 = [i for i, p in enumerate(params) if p.dtype == torch.float32]
    if f32:
        ps = [params[i] for i in f32]
        torch._foreach_mul_(ps, decay)
        torch._foreach_add_(ps, [updates[i] for i in f32], alpha=-h.lr)
    for p, u in zip(params, updates, strict=True):
        if p.dtype != torch.float32:
            p.copy_(p.float().mul_(decay).add_(u, alpha=-h.lr))


def _gather_grads(grads: list[torch.Tensor], sizes: list[int], blocks: bool, device: torch.device) -> torch.Tensor:
    """Grads (any float dtype) into one fp32 buffer, each padded to `sizes[i]` values with zeros."""
    flat = torch.empty(sum(sizes), dtype=torch.float32, device=device)
    parts = flat.split(sizes)
    torch._foreach_copy_([part[: g.numel()] for part, g in zip(parts, grads, strict=True)],
                         [g.reshape(-1) for g in grads])
    for part, g in zip(parts, grads, strict=True):
        if part.numel() > g.numel():
            part[g.numel():].zero_()
    return flat.view(-1, BLOCK) if blocks else flat


def _split_update(flat: torch.Tensor, sizes: list[int], params: list[torch.Tensor]) -> list[torch.Tensor]:
    return [u[: p.numel()].view_as(p) for u, p in zip(flat.reshape(-1).split(sizes), params, strict=True)]


GATHER_BELOW = 1 << 16  # tensors smaller than this are gathered into one buffer; larger ones go alone
CHUNK_BLOCKS = 2048  # CPU: blocks per chunk of the torch path (2 MiB temporaries; 36 ms against 39-61 ms for
# 4096 and 512-256 blocks, 8.4M params, 2 threads)


def _chunks(n_blocks: int, device: torch.device) -> list[tuple[int, int]]:
    size = CHUNK_BLOCKS if device.type == "cpu" else n_blocks
    return [(b0, min(b0 + size, n_blocks)) for b0 in range(0, n_blocks, size)]


def torch_q8_step(params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict], h: _Hyper,
                  scratch: Scratch | None = None) -> None:
    """The quantised tensors of one step. Small tensors are gathered (codes, scales, grads) into one
    buffer so the block-wise math runs once for all of them (per-op overhead dominates there); large
    ones run alone, where gathering would only add copies (and peak memory). On the CPU both go in
    chunks of CHUNK_BLOCKS blocks through `scratch`'s reused buffers. Same values either way: every
    block is updated on its own."""
    small = [i for i, p in enumerate(params) if p.numel() < GATHER_BELOW]
    for p, g, s in zip(params, grads, states, strict=True):
        if p.numel() < GATHER_BELOW:
            continue
        if g.dtype == torch.float32 and g.is_contiguous() and p.numel() % BLOCK == 0:
            gb = g.view(-1, BLOCK)  # no padding needed: use the gradient in place (read only)
        else:
            gb = _gather_grads([g], [s["exp_avg_normed_codes"].numel()], True, p.device)
        if p.is_contiguous():
            flat = p.view(-1)
            for b0, b1 in _chunks(gb.shape[0], p.device):
                update = q8_update(gb[b0:b1], {k: s[k][b0:b1] for k in Q_KEYS}, h, scratch)
                part = flat[b0 * BLOCK: min(b1 * BLOCK, flat.numel())]
                _apply([part], [update.view(-1)[: part.numel()]], h)
        else:
            _apply([p], [q8_update(gb, s, h).view(-1)[: p.numel()].view_as(p)], h)
    if not small:
        return
    params, grads, states = [params[i] for i in small], [grads[i] for i in small], [states[i] for i in small]
    sizes = [s["exp_avg_normed_codes"].numel() for s in states]
    g = _gather_grads(grads, sizes, True, params[0].device)
    flat = states[0] if len(states) == 1 else {k: torch.cat([s[k] for s in states]) for k in Q_KEYS}
    chunks = _chunks(g.shape[0], g.device)
    if len(chunks) == 1:
        update = q8_update(g, flat, h, scratch)  # scratch's "m" buffer: used by _apply below, before any reuse
    else:
        update = torch.empty_like(g)
        for b0, b1 in chunks:
            q8_update(g[b0:b1], {k: flat[k][b0:b1] for k in Q_KEYS}, h, scratch, out=update[b0:b1])
    if len(states) > 1:
        counts = [s["exp_avg_normed_scale"].numel() for s in states]
        for k in Q_KEYS:
            torch._foreach_copy_([s[k] for s in states], list(flat[k].split(counts)))
    _apply(params, _split_update(update, sizes, params), h)


def torch_f32_step(params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict], h: _Hyper) -> None:
    sizes = [p.numel() for p in params]
    g = _gather_grads(grads, sizes, False, params[0].device)
    m = torch.cat([s["exp_avg"].reshape(-1) for s in states])
    v = torch.cat([s["exp_avg_sq"].reshape(-1) for s in states])
    update = f32_update(g, m, v, h)
    torch._foreach_copy_([s["exp_avg"] for s in states], [x.view_as(p) for x, p in zip(m.split(sizes), params,
                                                                                         strict=True)])
    torch._foreach_copy_([s["exp_avg_sq"] for s in states], [x.view_as(p) for x, p in zip(v.split(sizes), params,
                                                                                           strict=True)])
    _apply(params, _split_update(update, sizes, params), h)


class AdamW8bit(RecordsPath, KeepStateDtypes, torch.optim.Optimizer):
    """AdamW (decoupled weight decay, bias correction) with block-wise 8-bit moments (state format 2).

    impl: "auto" (the Triton kernel for CUDA tensors, torch elsewhere: a CPU run never goes through
    Triton's slow interpreter by accident), "triton" (Triton wherever it can run, the interpreter
    included when TRITON_INTERPRET=1; torch with a notice elsewhere), "torch".
    """

    _group_keys_needed = frozenset({"min_8bit_size"})

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        min_8bit_size: int = 4096,
        impl: str = "auto",
    ) -> None:
        params = list(params)
        flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
        reject_dtensor(
            flat, "AdamW8bit", "block-wise quantised state lives per local shard and DCP cannot reshard it"
        )
        if impl not in IMPLS:
            raise ValueError(f"AdamW8bit: impl={impl!r} is not one of {', '.join(IMPLS)}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "min_8bit_size": min_8bit_size, "state_format": STATE_FORMAT}
        self._check_group(defaults, "")
        defaults["betas"] = tuple(betas)
        self.impl = impl
        self._scratch = Scratch()  # the torch path's reused CPU temporaries (not state: never saved)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str) -> None:
        """The constructor's checks, for its defaults and for every param group (given, added or loaded).

        beta1 > 0 needs beta1^2 < beta2: the stored u = m / (sqrt(v) + eps) is bounded (by
        sqrt((1 - beta1)^2 / ((1 - beta2) (1 - beta1^2 / beta2)))) only then; otherwise u of a value whose
        gradient shrinks grows without bound, sets its block's absmax scale and the block's other codes lose their
        resolution (drift from AdamW 3-223% at betas (0.9, 0.0)-(0.9, 0.1), outside audit)."""
        check_hyperparameters("AdamW8bit", group["lr"], group["eps"], group["weight_decay"], where)
        b1, b2 = check_betas("AdamW8bit", group["betas"], where)
        if b1 > 0.0 and b1 * b1 >= b2:
            raise ValueError(f"AdamW8bit: {where}betas {tuple(group['betas'])!r} have beta1^2 >= beta2; its 8-bit "
                             "first moment is stored as m / (sqrt(v) + eps), which is bounded only for beta1^2 < "
                             "beta2 (or beta1 = 0). Use beta2 > beta1^2 (e.g. (0.9, 0.95)), or FusedAdamW "
                             "(fp32 moments) for these betas")
        size = group["min_8bit_size"]
        if not isinstance(size, numbers.Integral) or isinstance(size, bool) or size < 0:
            raise ValueError(f"AdamW8bit: {where}min_8bit_size must be an integer >= 0 (tensors with fewer values keep "
                             f"fp32 moments), got {size!r}")

    def _state_spec(self, p: torch.Tensor, group: dict[str, Any]) -> StateSpec:
        """fp32 moments below min_8bit_size (converted from other floats), else format 2's codes (exact dtypes)."""
        if p.numel() < group["min_8bit_size"]:
            return {k: (tuple(p.shape), torch.float32, True) for k in ("exp_avg", "exp_avg_sq")}
        blocks = -(-p.numel() // BLOCK)
        return {k: (tuple(v.shape), v.dtype, False) for k, v in zero_q8_state(blocks, "meta").items()}

    def _spec_note(self, p: torch.Tensor, group: dict[str, Any]) -> str:
        n, size = p.numel(), group["min_8bit_size"]
        if n < size:
            return f" (its {n} values are fewer than min_8bit_size={size}: fp32 moments)"
        return (f" (its {n} values, at least min_8bit_size={size}, keep 8-bit moments in {-(-n // BLOCK)} blocks "
                f"of {BLOCK}; fp32 moments of another optimizer, such as torch.optim.AdamW or FusedAdamW, are not "
                "converted: start this optimizer's state afresh)")

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state[p]
        if state:
            return state
        state["step"] = torch.tensor(0.0)
        if p.numel() < group["min_8bit_size"]:
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        else:
            state.update(zero_q8_state(-(-p.numel() // BLOCK), p.device))
        return state

    def _prepare_state_dict(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """Loads state format 2, converts format 1 (e4m3, written before format 2 existed), and refuses
        any other with a message that names the format found; then every state is checked against its
        parameter (KeepStateDtypes.load_state_dict)."""
        return upgrade_state_dict(state_dict)

    def checkpoint_template(self, optim_sd: dict[str, Any], saved_keys: set[str]) -> dict[str, Any]:
        """For stride.checkpoint's DCP load: the template adapted to a checkpoint of state format 1
        (adamw8bit_format1.checkpoint_template), which `load_state_dict` then converts."""
        return checkpoint_template(optim_sd, saved_keys)

    def _use_triton(self, params: list[torch.Tensor]) -> bool:
        if self.impl == "torch":
            return False
        if self.impl == "auto":
            return all(p.is_cuda for p in params) and triton_runs_on(*params)
        if triton_runs_on(*params):
            return True
        notice_once("adamw8bit-torch", "AdamW8bit: Triton cannot run on these tensors; using the torch path")
        return False

    # Never traced: the step counts and bias corrections are Python numbers that change every step, so
    # under `compile = "model+optimizer"` dynamo recompiled each step (measured: 5.8 s per optimizer
    # step against 5.7 ms eager, reference model). The kernel (CUDA) and the gathered torch path are
    # already few launches; the model is still compiled.
    @torch.compiler.disable
    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            if any(p.grad.is_sparse for p in ps):
                raise RuntimeError("AdamW8bit does not support sparse gradients")
            states = [self._init_state(p, group) for p in ps]
            if not ps:
                continue
            torch._foreach_add_([s["step"] for s in states], 1.0)
            # Buckets of tensors that share one update formula: kind, step count, device, dtypes.
            buckets: dict[tuple, list[int]] = {}
            for i, (p, s) in enumerate(zip(ps, states, strict=True)):
                key = ("exp_avg" in s, int(s["step"].item()), p.device, p.dtype, p.grad.dtype)
                buckets.setdefault(key, []).append(i)
            beta1, beta2 = group["betas"]
            for (small, t, *_), idx in buckets.items():
                h = _Hyper(float(group["lr"]), beta1, beta2, group["eps"], group["weight_decay"], t)
                bp, bs = [ps[i] for i in idx], [states[i] for i in idx]
                bg = [p.grad for p in bp]
                if small:
                    self._record("torch")
                    torch_f32_step(bp, bg, bs, h)
                elif self._use_triton(bp) and all(x.is_contiguous() for x in bp + bg):
                    from stride.optim.triton_adamw8bit_kernel import adamw8bit_multi_tensor

                    self._record("triton")
                    adamw8bit_multi_tensor(bp, bg, bs, lr=h.lr, beta1=beta1, beta2=beta2, eps=h.eps,
                                           weight_decay=h.weight_decay, step=t)
                else:
                    self._record("torch")
                    torch_q8_step(bp, bg, bs, h, self._scratch if bp[0].device.type == "cpu" else None)
        return loss
