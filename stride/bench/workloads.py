"""Standard workloads: fixed, versioned definitions so two machines or versions compare like for like.

A workload is a set of config overrides on top of the defaults. Changing any value of a workload
means bumping its version: results of different versions are not comparable.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Workload:
    name: str
    version: int
    description: str
    overrides: tuple[str, ...]
    throughput_unit: str = "samples/s"
    tags: tuple[str, ...] = field(default=())
    kind: str = "supervised"  # supervised: stride.Trainer; ppo: stride.rl.ppo
    params: tuple[tuple[str, float | int], ...] = ()  # kind-specific settings (ppo: env and PPO fields)


# versions bumped 2026-12-05 (all but PPO): the synthetic source's validation windows now start `embargo` rows after
# the last row a training target uses, and its split honours test_fraction (audit 9): the same training batches,
# other validation windows, so validation losses and times to target are not comparable with earlier versions
_COMMON = ("data.n_assets=8", "data.n_steps=8192", "data.horizons=[1, 5, 20]", "metrics.progress=false",
           "train.val_batches=8", "metrics.log_every=10")

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            # v2: 120 steps, validated every 20 (v1's 60 steps stopped before its target, at val 1.507). v3: the
            # validation windows moved (audit 9), the loss reads ~0.15 lower: 1.5 was met at the first validation.
            # 1.37 is met at step 60 (seed 0: 1.398, 1.41, 1.365) and 80 (seed 1: 1.414, 1.381, 1.382, 1.35) on
            # Intel Xeon CPU; the curve is flat past step 20 (within 0.05), so the step it is met at moves with noise
            "ts_transformer_tiny", 3, "time-series transformer, tiny (d=64, L=2), seq 64, batch 64, fp32",
            (*_COMMON, "model.name=ts_transformer", "model.size=tiny", "data.seq_len=64",
             "train.batch_size=64", "train.steps=120", "train.val_every=20", "train.target_val_loss=1.37"),
        ),
        Workload(
            "ts_transformer_small", 2, "time-series transformer, small (d=128, L=4), seq 128, batch 64, bf16",
            (*_COMMON, "model.name=ts_transformer", "model.size=small", "data.seq_len=128",
             "train.batch_size=64", "train.steps=100", "train.val_every=50", "train.precision=bf16"),
        ),
        Workload(
            "ts_transformer_base", 2, "time-series transformer, base (d=256, L=6), seq 256, batch 128, bf16",
            (*_COMMON, "model.name=ts_transformer", "model.size=base", "data.seq_len=256",
             "train.batch_size=128", "train.steps=200", "train.val_every=100", "train.precision=bf16"),
        ),
        Workload(
            # v2: 400 steps (v1's 80 made throughput windows of ~0.15 s: cv 3-5 % from timer jitter alone)
            "mlp_tiny", 3, "MLP over tabular features (window of 8 steps), width 128, batch 256, fp32",
            (*_COMMON, "model.name=mlp", "model.size=tiny", "data.seq_len=8",
             "train.batch_size=256", "train.steps=400", "train.val_every=400"),
        ),
        Workload(
            "lstm_small", 2, "residual LSTM (hidden 64, 3 layers), seq 64, batch 64, fp32",
            (*_COMMON, "model.name=lstm", "model.size=small", "data.seq_len=64",
             "train.batch_size=64", "train.steps=60", "train.val_every=60"),
        ),
        Workload(
            "tcn_small", 2, "temporal conv net (width 64, 5 dilated blocks), seq 64, batch 64, fp32",
            (*_COMMON, "model.name=tcn", "model.size=small", "data.seq_len=64",
             "train.batch_size=64", "train.steps=60", "train.val_every=60"),
        ),
        Workload(
            "deeplob_small", 2, "DeepLOB-style CNN+LSTM (32 channels, hidden 64), seq 64, batch 64, fp32",
            (*_COMMON, "model.name=deeplob", "model.size=small", "data.seq_len=64",
             "train.batch_size=64", "train.steps=40", "train.val_every=40"),
        ),
        Workload(
            "gpt_returns_small", 2, "GPT-style decoder (d=128, L=4) on 64 return-bin tokens, seq 128, batch 32",
            (*_COMMON, "model.name=token_lm", "model.size=small", "data.seq_len=128",
             "data.source=stride.data.tokens:return_tokens", "train.batch_size=32", "train.steps=60",
             "train.val_every=60"),
            throughput_unit="tokens/s",
        ),
        Workload(
            "ppo_market_making", 1, "PPO on 256 vectorised market-making envs in torch, 64-step rollouts",
            ("metrics.progress=false",), throughput_unit="env steps/s", kind="ppo",
            params=(("n_envs", 256), ("episode_len", 64), ("updates", 12), ("rollout_steps", 64)),
        ),
        Workload(
            "mlp_base", 2, "MLP over tabular features (window of 16 steps), width 512, batch 1024, bf16",
            (*_COMMON, "model.name=mlp", "model.size=base", "data.seq_len=16",
             "train.batch_size=1024", "train.steps=200", "train.val_every=100", "train.precision=bf16"),
        ),
    ]
}

SUITES: dict[str, tuple[str, ...]] = {
    "quick": ("ts_transformer_tiny", "mlp_tiny"),
    "standard": ("ts_transformer_tiny", "ts_transformer_small", "mlp_tiny", "mlp_base", "lstm_small",
                 "tcn_small", "deeplob_small", "gpt_returns_small", "ppo_market_making"),
    "full": tuple(WORKLOADS),
}

# `--sweep tradeoffs`: each technique as overrides on a workload (here, not in stride.bench.sweeps, so the
# command line checks names and lists them in --help without importing torch)
TRADEOFFS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "bf16": ("train.precision=bf16",),
    "fp16": ("train.precision=fp16",),
    "compile": ("train.compile=model+optimizer",),
    "ac_full": ("train.activation_checkpointing=full",),
    "grad_accum4": ("train.grad_accum=4",),
    "kernels_triton": ("train.kernels=triton",),
    "adamw8bit": ("optim.name=adamw8bit",),
    "adafactor": ("optim.name=adafactor",),
}


def check_variants(names: list[str]) -> None:
    """A ConfigError (one line, exit 2) naming every unknown tradeoff variant and the valid ones."""
    from stride.config.errors import ConfigError, suggest

    unknown = [v for v in names if v not in TRADEOFFS]
    if unknown:
        hint = suggest(unknown[0], list(TRADEOFFS)) if len(unknown) == 1 else ""
        raise ConfigError(f"--variants: unknown tradeoff variant(s) {', '.join(map(repr, unknown))}{hint}; "
                          f"variants are {', '.join(TRADEOFFS)}")
