"""Run one workload through the real trainer and turn its measurements into a results entry.

The suite runs workloads through `stride.Trainer` exactly as `stride train` does; the only addition
is a callback reading each step's wall time, so the suite measures what users run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stride.bench.stats import spread
from stride.bench.workloads import Workload
from stride.config import config_to_dict, load_config
from stride.train.trainer import Trainer

REPEATS = 3  # throughput windows per workload (after warm-up)


def throughput_windows(step_times: list[float], skip: int, batch: int | Sequence[int],
                       repeats: int = REPEATS) -> list[float]:
    """Samples/s over `repeats` equal windows of the steps after the first `skip` (warm-up). `batch`: the samples
    (tokens, env steps) of every step, or each step's own, in the order of `step_times`."""
    times = step_times[skip:]
    work = [batch] * len(times) if isinstance(batch, int) else list(batch[skip:])
    n = len(times) // repeats
    if n == 0:
        return [sum(work) / sum(times)] if times else []
    return [sum(work[i * n : (i + 1) * n]) / sum(times[i * n : (i + 1) * n]) for i in range(repeats)]


def run_workload(w: Workload, device: str, out: Path | None, extra: list[str] | None = None,
                 suffix: str = "", callbacks: list[Any] | None = None,
                 after_update: Callable[[], None] | None = None) -> dict[str, Any]:
    """Train workload `w` (plus `extra` overrides) once; `suffix` names a sweep variant (`name+variant`);
    `callbacks` (the sweep's step display, its stop check) go to the Trainer and measure nothing; PPO, which has
    its own loop, calls `after_update` (the stop check) after each update instead."""
    name = w.name + suffix
    if w.kind == "ppo":
        return run_ppo_workload(w, name, device, extra, (out / name) if out else None, after_update)
    cfg = workload_config(w, name, device, extra)
    trainer = Trainer(config=cfg, out=(out / name) if out else None, write_run_dir=out is not None,
                      callbacks=callbacks)
    result = trainer.fit()  # the same Trainer as `stride train`
    s = result.summary
    # each step's own samples (the trainer counts the batches it trained, not train.batch_size), in tokens: x T
    per_sample = trainer.seq_len if w.throughput_unit == "tokens/s" else 1
    windows = throughput_windows(trainer.timer.step_seconds, cfg.metrics.skip_steps,
                                 [n * per_sample for n in trainer.step_samples])
    method = (f"{{n}} equal windows of steps after {cfg.metrics.skip_steps} warm-up steps, "
              "wall clock per step (perf_counter; CUDA: events)")
    return make_entry(w, name, cfg, windows, method, s, run_dir=str(result.run_dir) if result.run_dir else None)


def run_ppo_workload(w: Workload, name: str, device: str, extra: list[str] | None,
                     run_path: Path | None = None, after_update: Callable[[], None] | None = None) -> dict[str, Any]:
    """The RL workload: PPO has its own loop (the policy makes its data) but the same measurements. With
    `run_path`, a run folder as the other workloads get: config.toml and env.json, a metrics.jsonl line per update,
    summary.json (it had none: its entry's run_dir was empty and nothing of the run was kept but the entry)."""
    import dataclasses

    from stride.rl.market_env import MarketMakingSpec
    from stride.rl.ppo import PPOSettings, train_ppo

    cfg = workload_config(w, name, device, extra)
    params = dict(w.params)
    spec_keys = {f.name for f in dataclasses.fields(MarketMakingSpec)}
    spec = MarketMakingSpec(**{k: v for k, v in params.items() if k in spec_keys})
    settings = PPOSettings(**{k: v for k, v in params.items() if k not in spec_keys})
    r = train_ppo(cfg, spec, settings, after_update)
    windows = throughput_windows(r["update_times_s"], 1, r["env_steps_per_update"])
    if run_path is not None:
        _write_ppo_run(run_path, cfg, params, r)
    # an env step is PPO's timestep: timesteps/s is its throughput (make_entry puts it at the median)
    return make_entry(w, name, cfg, windows, "{n} equal windows of PPO updates after 1 warm-up update",
                      {**r, "timesteps_per_s": r["env_steps_per_s"]}, skipped_steps=0, ppo=params,
                      final_episode_return=r["final_episode_return"], episode_returns=r["episode_returns"],
                      run_dir=str(run_path) if run_path is not None else None)


def _write_ppo_run(path: Path, cfg: Any, params: dict[str, Any], r: dict[str, Any]) -> None:
    """A PPO run's folder: what `stride train` writes for a supervised run, in PPO's terms (an update is a step)."""
    from stride.config.loader import config_to_toml
    from stride.metrics.run_dir import RunDir

    run = RunDir(path)
    try:
        run.record(config_to_toml(cfg))
        returns = r["episode_returns"]
        for i, t in enumerate(r["update_times_s"]):
            run.log({"step": i + 1, "update_time_s": t, "env_steps": r["env_steps_per_update"] * (i + 1)})
        run.write_json("summary.json", {**{k: v for k, v in r.items() if k != "update_times_s"}, "kind": "ppo",
                                        "ppo": params, "episodes": len(returns)})
    finally:
        run.close()


def workload_config(w: Workload, name: str, device: str, extra: list[str] | None) -> Any:
    return load_config(overrides=[*w.overrides, f"train.device={device}", f"train.name={name}", *(extra or [])])


# Figures every entry carries, read from a trainer summary (or PPO's summary-shaped dict; absent -> None). The
# rates among them (mfu, timesteps_per_s) are put at the throughput's median by `rates_at_median`.
# exposed_comm_fraction, comm_cost_fraction, comm_core_free: `stride report`'s communication rule reads them (DDP
# runs; None elsewhere); peak_flops_per_s and peak_clock_ghz: what MFU divides by, which `stride compare` checks is
# alike on both sides.
_SUMMARY_KEYS = ("timesteps_per_s", "mfu", "flops_per_step", "peak_mem_bytes", "peak_mem_kind",
                 "step_time_breakdown_s", "time_to_target_s", "target_val_loss", "final_val_loss",
                 "final_train_loss", "steps", "skipped_steps", "saved_activation_bytes", "params", "params_sha256",
                 "optimizer_impl", "exposed_comm_fraction", "comm_cost_fraction", "comm_core_free",
                 "peak_flops_per_s", "peak_clock_ghz", "run_queue_waiting_threads", "contention_note")

RATES_AT = ("the median of the {n} throughput figures (its step time: {step}); MFU and timesteps/s at that same "
            "step time")


def summary_rate(s: dict[str, Any], unit: str) -> float | None:
    """The summary's own figure in the throughput's unit (the mean over its timed steps)."""
    key = {"tokens/s": "timesteps_per_s", "env steps/s": "env_steps_per_s"}.get(unit, "samples_per_s")
    v = s.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def rates_at_median(s: dict[str, Any], unit: str, median: float | None) -> dict[str, Any]:
    """MFU, timesteps/s and step time at the throughput's median, from a summary whose figures are all at its mean
    step time over the timed steps (throughput, timesteps/s and achieved FLOP/s are each work per step / that step
    time): each is scaled by median / the summary's own throughput. Before, a row showed the median throughput
    beside the mean's MFU (mlp_tiny: 84,897 samples/s at 12.0 % MFU; 17.4 % at that throughput)."""
    rate = summary_rate(s, unit)
    if not median or rate is None:
        return {"mfu": None, "mfu_error": s.get("mfu_error"), "timesteps_per_s": None, "step_time_s": None}
    k = median / rate
    step_s, achieved, timesteps = s.get("step_time_s"), s.get("achieved_flops_per_s"), s.get("timesteps_per_s")
    out: dict[str, Any] = {"mfu": None, "mfu_error": s.get("mfu_error"),
                           "timesteps_per_s": timesteps * k if timesteps else None,
                           "step_time_s": step_s / k if step_s else None}
    peak = s.get("peak_flops_per_s")
    if achieved is None and s.get("mfu") is not None and peak:  # a summary-shaped dict without achieved FLOP/s
        achieved = s["mfu"] * peak
    if achieved and peak and not s.get("mfu_error"):
        from stride.metrics.peak import Peak, mfu_fields

        f = mfu_fields(achieved * k, Peak(float(peak), str(s.get("peak_flops_source"))))  # > 100 %: left out, said
        out.update(mfu=f["mfu"], mfu_error=f["mfu_error"])
    return out


def make_entry(w: Workload, name: str, cfg: Any, windows: list[float], method: str, s: dict[str, Any],
           run_dir: str | None = None, runs: int = 1, **extra: Any) -> dict[str, Any]:
    """One results.json workload entry; `method` may name the window count as {n}. Every rate of the entry
    (throughput, MFU, timesteps/s) is at one step time, the throughput's median (`rates_at`); the summary's own
    figures, at the mean step time over its timed steps, stay under `timed_steps_mean`. `runs`: how many separate
    runs the figures come from (1: windows of one run, whose spread holds no drift between runs; `stride compare`
    says so)."""
    tput = {"unit": w.throughput_unit, **spread(windows)}
    at = rates_at_median(s, w.throughput_unit, tput["median"])
    step = f"{at['step_time_s'] * 1e3:.3f} ms" if at["step_time_s"] else "unknown"
    return {
        "name": name, "version": w.version, "description": w.description, "config": config_to_dict(cfg),
        "throughput": tput, "throughput_method": method.format(n=tput["n"]),
        "mfu_peak_source": s.get("peak_flops_source"),
        **{k: s.get(k) for k in _SUMMARY_KEYS},
        "mfu": at["mfu"],
        "mfu_error": at["mfu_error"],
        "timesteps_per_s": at["timesteps_per_s"],
        "step_time_s": at["step_time_s"],
        "rates_at": RATES_AT.format(n=tput["n"], step=step),
        "timed_steps_mean": {"throughput": summary_rate(s, w.throughput_unit), "mfu": s.get("mfu"),
                             "timesteps_per_s": s.get("timesteps_per_s"), "step_time_s": s.get("step_time_s")},
        "run_dir": run_dir,
        "runs": runs,
        **extra,
    }
