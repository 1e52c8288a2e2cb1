"""Run one workload through the real trainer and turn its measurements into a results entry.

The suite runs workloads through `stride.Trainer` exactly as `stride train` does; the only addition
is a callback reading each step's wall time, so the suite measures what users run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stride.bench.stats import spread
from stride.bench.workloads import Workload
from stride.config import config_to_dict, load_config
from stride.train.trainer import Trainer

REPEATS = 3  # throughput windows per workload (after warm-up)


def throughput_windows(step_times: list[float], skip: int, batch: int, repeats: int = REPEATS) -> list[float]:
    """Samples/s over `repeats` equal windows of the steps after the first `skip` (warm-up)."""
    times = step_times[skip:]
    n = len(times) // repeats
    if n == 0:
        return [batch * len(times) / sum(times)] if times else []
    return [batch * n / sum(times[i * n : (i + 1) * n]) for i in range(repeats)]


def run_workload(w: Workload, device: str, out: Path | None, extra: list[str] | None = None,
                 suffix: str = "", callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Train workload `w` (plus `extra` overrides) once; `suffix` names a sweep variant (`name+variant`);
    `callbacks` (the sweep's step display) go to the Trainer and measure nothing."""
    name = w.name + suffix
    if w.kind == "ppo":
        return run_ppo_workload(w, name, device, extra)
    cfg = workload_config(w, name, device, extra)
    trainer = Trainer(config=cfg, out=(out / name) if out else None, write_run_dir=out is not None,
                      callbacks=callbacks)
    result = trainer.fit()  # the same Trainer as `stride train`
    s = result.summary
    per_step = cfg.train.batch_size * (cfg.data.seq_len if w.throughput_unit == "tokens/s" else 1)
    windows = throughput_windows(trainer.timer.step_seconds, cfg.metrics.skip_steps, per_step)
    method = (f"{{n}} equal windows of steps after {cfg.metrics.skip_steps} warm-up steps, "
              "wall clock per step (perf_counter; CUDA: events)")
    return make_entry(w, name, cfg, windows, method, s, run_dir=str(result.run_dir) if result.run_dir else None)


def run_ppo_workload(w: Workload, name: str, device: str, extra: list[str] | None) -> dict[str, Any]:
    """The RL workload: PPO has its own loop (the policy makes its data) but the same measurements."""
    import dataclasses

    from stride.rl.market_env import MarketMakingSpec
    from stride.rl.ppo import PPOSettings, train_ppo

    cfg = workload_config(w, name, device, extra)
    params = dict(w.params)
    spec_keys = {f.name for f in dataclasses.fields(MarketMakingSpec)}
    spec = MarketMakingSpec(**{k: v for k, v in params.items() if k in spec_keys})
    settings = PPOSettings(**{k: v for k, v in params.items() if k not in spec_keys})
    r = train_ppo(cfg, spec, settings)
    windows = throughput_windows(r["update_times_s"], 1, r["env_steps_per_update"])
    return make_entry(w, name, cfg, windows, "{n} equal windows of PPO updates after 1 warm-up update", r,
                  timesteps_per_s=r["env_steps_per_s"], skipped_steps=0, ppo=params,
                  final_episode_return=r["final_episode_return"], episode_returns=r["episode_returns"])


def workload_config(w: Workload, name: str, device: str, extra: list[str] | None) -> Any:
    return load_config(overrides=[*w.overrides, f"train.device={device}", f"train.name={name}", *(extra or [])])


# Figures every entry carries, read from a trainer summary (or PPO's summary-shaped dict; absent -> None).
_SUMMARY_KEYS = ("timesteps_per_s", "mfu", "flops_per_step", "peak_mem_bytes", "peak_mem_kind",
                 "step_time_breakdown_s", "time_to_target_s", "target_val_loss", "final_val_loss",
                 "final_train_loss", "steps", "skipped_steps", "saved_activation_bytes", "params", "params_sha256")


def make_entry(w: Workload, name: str, cfg: Any, windows: list[float], method: str, s: dict[str, Any],
           run_dir: str | None = None, **extra: Any) -> dict[str, Any]:
    """One results.json workload entry; `method` may name the window count as {n}."""
    tput = {"unit": w.throughput_unit, **spread(windows)}
    return {
        "name": name, "version": w.version, "description": w.description, "config": config_to_dict(cfg),
        "throughput": tput, "throughput_method": method.format(n=tput["n"]),
        "mfu_peak_source": s.get("peak_flops_source"),
        **{k: s.get(k) for k in _SUMMARY_KEYS},
        "run_dir": run_dir,
        **extra,
    }
