"""Does the validated config fit this host? Checked before the model or the data is built.

Why: a config that cannot fit failed deep inside the build, after seconds to minutes, with a raw traceback:
`model.d_model = 100000000` asked torch's CPU allocator for 4e16 bytes, `model.n_layers = 100000` spent
minutes initialising 5e9 parameters, `data.n_assets = data.n_steps = 100000` asked NumPy for 74.5 GiB. Here
the model's size is counted on the meta device (stride.models.size) and the synthetic market's from its shape
(stride.data.synthetic.market_bytes), and a config whose estimate exceeds the memory available is refused in
one line naming its keys, the estimate and the limit, as `stride comm --max-bytes` refuses buffers it cannot
hold. The estimate is a floor (parameters, gradients, optimizer state and the data; no activations), so what
it refuses cannot run; what it passes may still run out of memory in the step.

Where it goes, per process (`ranks_here` processes on this host build the same at once):
- the host: the synthetic market (its generation's peak, then what the run keeps) and the whole model, which
  every rank builds in host memory before it moves or shards it; on a CPU run also the gradients and the
  optimizer state, split over `parallel.dp_shard` x `tp` x `pp`;
- a CUDA device: the whole model (moved there before it is split), then the weights, gradients and optimizer
  state of this rank's part; compared with the device's free memory.

Also here: `train.threads` above the cores this process may use is a warning (not an error): the run works,
but 1000 threads on 2 cores measured 0.06 % MFU against 17 %.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stride.config.errors import ConfigError
from stride.config.schema import OptimConfig, RunConfig
from stride.files import host
from stride.files.rank_share import ranks_sharing_cores, usable_cores

if TYPE_CHECKING:
    import torch

log = logging.getLogger("stride.config")

MODEL_SIZE_KEYS = ("d_model", "n_layers", "n_heads", "ffn_mult")


def optimizer_state_bytes(o: OptimConfig, param_bytes: int = 4) -> int:
    """Bytes of optimizer state per parameter of `param_bytes` bytes (stride.optim.factory's optimizers)."""
    if o.name in ("adamw", "adamw_triton"):
        return 2 * param_bytes  # exp_avg, exp_avg_sq
    if o.name == "sgd":
        return param_bytes if o.momentum else 0
    if o.name == "adamw8bit":
        return 2  # two 8-bit moments (block scales aside)
    if o.name == "adafactor":
        return 2 if o.betas[0] else 0  # a bf16 first moment; the factored second moments are rows + columns
    return 0


@dataclass
class MemoryEstimate:
    """Bytes a run of the config needs, per process and on this host; None where a part is not known."""

    params: int | None  # parameters of the model the config builds (None: not built from the config, or unknown)
    per_param: int  # bytes of weights, gradients and optimizer state a parameter
    model_bytes: int  # the whole model: parameters and buffers
    train_bytes: int  # one rank's weights, gradients and optimizer state (its shard of them)
    data_peak: int  # the synthetic market while it is generated
    data_kept: int  # what the run keeps of it
    ranks_here: int
    on_device: bool  # the model trains on a CUDA device (else on the host)

    @property
    def host_model_bytes(self) -> int:
        """One process's model in host memory: built whole there, then trained there (CPU) or moved (CUDA)."""
        return self.model_bytes if self.on_device else max(self.model_bytes, self.train_bytes)

    @property
    def host_bytes(self) -> int:
        """Host memory needed by the `ranks_here` processes: data, then the model beside what is kept of it."""
        return self.ranks_here * max(self.data_peak, self.data_kept + self.host_model_bytes)

    @property
    def device_bytes(self) -> int:
        """One CUDA device's memory: the whole model moved there, then this rank's part of the training state."""
        return max(self.model_bytes, self.train_bytes) if self.on_device else 0


def _n_features(cfg: RunConfig) -> int:
    """Features a window has, known without building the data; 1 (a floor) where only the data knows."""
    d = cfg.data
    if d.source == "synthetic":
        from stride.data.synthetic import FEATURES

        return len(FEATURES)
    if d.source == "store":
        if d.columns:
            return len(d.columns)
        try:
            import json
            from pathlib import Path

            return max(1, len(json.loads((Path(d.store) / "manifest.json").read_text())["columns"]))
        except Exception:  # the build says what is wrong with the store
            return 1
    return 1


def estimate_memory(cfg: RunConfig, device: torch.device | str | None = None, *, ranks_here: int | None = None,
                    model: bool = True, data: bool = True) -> MemoryEstimate:
    """What `cfg` needs (see the module docstring); `model` / `data` False: the caller brings that part."""
    from stride.models.size import model_size

    dev = _device(cfg, device)
    ranks = ranks_here if ranks_here is not None else int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    params, per, model_bytes, train_bytes = None, 0, 0, 0
    if model:
        size = model_size(cfg.model, _n_features(cfg), cfg.data.seq_len, len(cfg.data.horizons))
        if size is not None:
            p = cfg.parallel
            width = size.param_bytes // max(size.params, 1)  # 4: fp32 parameters (autocast keeps them so)
            per = 2 * width + optimizer_state_bytes(cfg.optim, width)
            params, model_bytes = size.params, size.bytes
            train_bytes = size.params * per // (p.dp_shard * p.tp * p.pp) + size.buffer_bytes
    data_peak = data_kept = 0
    if data and cfg.data.source == "synthetic":
        from stride.data.synthetic import market_bytes

        data_peak, data_kept = market_bytes(cfg.data.n_assets, cfg.data.n_steps, len(cfg.data.horizons))
    return MemoryEstimate(params, per, model_bytes, train_bytes, data_peak, data_kept, max(ranks, 1),
                          dev.type == "cuda")


def _device(cfg: RunConfig, device: torch.device | str | None) -> torch.device:
    """`device`, or the one `train.device` resolves to (auto: cuda where available)."""
    import torch

    from stride.train.device import resolve_device

    return torch.device(device) if device is not None else resolve_device(cfg.train.device)


def host_available() -> int:
    """Bytes of host memory available now (stride.files.host, which `stride data synth` reads too)."""
    return host.available_memory_bytes()


def device_available(device: torch.device) -> int:
    """Free bytes on a CUDA device now."""
    import torch

    return int(torch.cuda.mem_get_info(device)[0])


def check_memory(cfg: RunConfig, device: torch.device | str | None = None, *, ranks_here: int | None = None,
                 model: bool = True, data: bool = True) -> MemoryEstimate:
    """Raise a one-line ConfigError when `cfg` cannot fit the host's memory (or the CUDA device's); else return the
    estimate. Nothing is allocated: call it before the data and the model are built."""
    dev = _device(cfg, device)
    est = estimate_memory(cfg, dev, ranks_here=ranks_here, model=model, data=data)
    free_host = host_available()
    if est.host_bytes > free_host:
        generating = est.data_peak >= est.data_kept + est.host_model_bytes  # the peak: while the data is generated
        data = (est.data_peak, "while it is generated") if generating else (est.data_kept, "kept for training")
        raise ConfigError(_refusal(cfg, est, "host memory", est.host_bytes, free_host, "available",
                                   0 if generating else est.host_model_bytes, data))
    if est.on_device:
        free = device_available(dev)
        if est.device_bytes > free:
            raise ConfigError(_refusal(cfg, est, f"memory on {dev}", est.device_bytes, free, "free",
                                       est.device_bytes, (0, "")))
    return est


def _refusal(cfg: RunConfig, est: MemoryEstimate, where: str, need: int, have: int, state: str, model_part: int,
             data: tuple[int, str]) -> str:
    """One line: the estimate of `where` against `have`, the keys behind each part that matters (a tenth of the
    estimate or more, or the largest), and the keys to lower."""
    m, d, p = cfg.model, cfg.data, cfg.parallel
    parts: list[tuple[int, str, str]] = []  # (bytes, what, keys to lower)
    if est.params is not None and model_part:
        keys = [f"`model.name` = {m.name!r}", f"`model.size` = {m.size!r}"]
        keys += [f"`model.{k}` = {getattr(m, k)!r}" for k in MODEL_SIZE_KEYS if getattr(m, k) is not None]
        shards = p.dp_shard * p.tp * p.pp
        how = (f"to train at {est.per_param} B a parameter (weights, gradients and `optim.name` = "
               f"{cfg.optim.name!r} state){f', split over {shards} shards' if shards > 1 else ''}"
               if model_part > est.model_bytes else "built whole, before it is trained or split")
        set_keys = [f"`model.{k}`" for k in MODEL_SIZE_KEYS if getattr(m, k) is not None]
        parts.append((model_part, f"the model of {', '.join(keys)} has {est.params:.3g} parameters: "
                      f"{host.binary_size(model_part)} {how}", " or ".join(set_keys) or "`model.size`"))
    if data[0]:
        parts.append((data[0], f"the synthetic market of `data.n_assets` = {d.n_assets} x `data.n_steps` = "
                      f"{d.n_steps} takes {host.binary_size(data[0])} {data[1]}",
                      "`data.n_assets` or `data.n_steps`"))
    parts.sort(key=lambda x: -x[0])
    shown = [x for i, x in enumerate(parts) if i == 0 or x[0] * 10 >= need]
    procs = f" for the {est.ranks_here} processes on this host" if est.ranks_here > 1 and where == "host memory" \
        else ""
    return (f"the run does not fit in memory: it needs about {host.binary_size(need)} of {where}{procs}, "
            f"{host.binary_size(have)} {state}: "
            f"{'; '.join(what for _, what, _ in shown) or 'the model and the data'} (activations not counted); "
            f"lower {' and '.join(keys for _, _, keys in shown) or 'the model or the data'}")


def threads_warning(cfg: RunConfig, ranks_here: int | None = None) -> str | None:
    """Why `train.threads` will oversubscribe this host's cores, or None (not set, or within them)."""
    threads = cfg.train.threads
    if threads is None:
        return None
    # a rank pinned apart counts alone (`stride plan`'s local runs, `stride bench` scaling): "1 x 2 processes = 2
    # threads exceeds the 1 usable cores" was said of two ranks pinned a core each
    ranks = ranks_sharing_cores(ranks_here) or 1
    cores = usable_cores()
    total = threads * max(ranks, 1)
    if total <= cores:
        return None
    many = f" x {ranks} processes on this host = {total} threads" if ranks > 1 else ""
    fit = max(cores // max(ranks, 1), 1)
    return (f"`train.threads` = {threads}{many} exceeds the {cores} usable cores of this process "
            f"(os.sched_getaffinity): the threads will contend for cores and slow every step "
            f"(1000 threads on 2 cores: 0.06 % MFU against 17 %); set `train.threads` <= {fit} or leave it unset")


def check_resources(cfg: RunConfig, device: torch.device | str | None = None, *, ranks_here: int | None = None,
                    model: bool = True, data: bool = True, warn: bool = True) -> MemoryEstimate:
    """Everything above, before the data and the model are built: refuse a config that cannot fit in memory
    (ConfigError, one line), and warn once (logger `stride.config`, local rank 0) about `train.threads` above the
    usable cores. `model` / `data` False: the caller brings that part (the Trainer's `model=` / `train_data=`)."""
    est = check_memory(cfg, device, ranks_here=ranks_here, model=model, data=data)
    msg = threads_warning(cfg, ranks_here) if warn and os.environ.get("LOCAL_RANK", "0") == "0" else None
    if msg and msg not in _warned:  # once a process: a sweep builds many trainers of one config
        _warned.add(msg)
        log.warning("stride: warning: %s", msg)
    return est


_warned: set[str] = set()
