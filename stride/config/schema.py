"""The typed run config: one object that flows through every stride command, and the one place that
says what each key is.

Every field has a type (a `Literal` where the choices are a closed set), a default, the range or
pattern the loader enforces (`Annotated[..., Range(...)]`), and a docstring below it: what it does,
its unit, and when to change it. The loader (`loader.py`) checks types, choices and ranges from these
annotations; `validate.py` checks what relates several fields; `stride config show` and
docs/config.md are generated from this file. Code that needs a key's choices reads them here
(`typing.get_args(Kernels)`), never from a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from stride.config.constraints import Length, Matches, MaxBytes, Range

Positive = Range(gt=0)
NonNegative = Range(ge=0)
Fraction = Range(ge=0, lt=1)
# What no name a person reads may hold (outside audit 20): C0 and C1 control characters and DEL (ESC and CSI drive a
# terminal: recolour, retitle, hide lines; NUL ends a C string; a line break splits a log line) and the bidirectional
# embeddings, overrides and isolates (U+202A-202E, U+2066-2069: they show a name's characters in another order).
# Emoji, right-to-left scripts and the plain LRM/RLM marks are names like any other.
NAME_CHARS = r"\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
Seed = Range(ge=0, le=2**63 - 1)  # NumPy takes no seed below 0, torch none from 2**64: room for derived seeds (+ 1)

Loss = Literal["mse", "huber", "quantile"]
OptimName = Literal["adamw", "sgd", "adamw_triton", "adamw8bit", "adafactor"]
SHARDED_PARAM_OPTIMIZERS: tuple[str, ...] = ("adamw", "adamw_triton", "sgd")
"""The `optim.name`s that take DTensor parameters (`parallel.dp_shard` > 1 or `parallel.tp` > 1): their update is
elementwise, so each rank updates its own shard. adamw8bit's 8-bit blocks and adafactor's row/column moments need
whole tensors and refuse DTensors (stride.optim.dtensor); tests/optim checks this list against the classes."""
OptimImpl = Literal["auto", "foreach", "fused", "for-loop"]
Schedule = Literal["cosine", "constant"]
Precision = Literal["fp32", "bf16", "fp16"]
ActivationCheckpointing = Literal["none", "full", "every_k"]
Compile = Literal["off", "model", "model+optimizer"]
Kernels = Literal["torch", "triton", "compile"]
Normalize = Literal["none", "train", "expanding", "rolling"]
BatchDtype = Literal["float32", "bfloat16"]
PipelineSchedule = Literal["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv"]
Backend = Literal["auto", "gloo", "nccl"]
LowPrecision = Literal["none", "bf16", "fp16"]
CommHook = Literal["none", "fp16", "bf16", "powersgd"]
Staging = Literal["auto", "loop", "background"]
Resume = Literal["auto", "never"]
Verify = Literal["checksum", "size"]
SpikeAction = Literal["log", "skip", "rollback"]
WandbMode = Literal["offline", "online"]


@dataclass
class ModelConfig:
    """What to train."""

    name: str = "ts_transformer"
    """A registered workload (ts_transformer, token_lm, mlp, lstm, tcn, deeplob) or `module:factory`, which
    imports `module` (its code runs, as any plugin's does) and calls factory(n_features=, seq_len=, n_horizons=,
    **kwargs)."""
    size: str = "tiny"
    """A row of the workload's size table (tiny, small, base, large), which its override keys below amend."""
    d_model: Annotated[int, Positive] | None = None
    """Width of the residual stream (transformers) or of the layers (mlp, lstm, tcn, deeplob); None: the size's."""
    n_layers: Annotated[int, Positive] | None = None
    """Blocks in `model.blocks` (the unit of pipeline stages and checkpointing); None: the size's. tcn built n + 2
    blocks before 2026-12-07: a run saved before then resumes with n + 2 and `checkpoint.force_resume = true`."""
    n_heads: Annotated[int, Positive] | None = None
    """Attention heads (transformers): d_model / n_heads must be even, and n_heads a multiple of parallel.tp."""
    ffn_mult: Annotated[float, Positive] | None = None
    """SwiGLU hidden size as a multiple of d_model (rounded to a multiple of 8); None: 8/3 (as many parameters as a
    4x GELU MLP)."""
    patch_len: Annotated[int, Positive] = 1
    """Timesteps per token (non-overlapping patches): 1 is one token per step; p divides attention cost by p^2."""
    causal: bool = True
    """Causal attention (the forecast pools the last token); false: bidirectional over the window, mean-pooled."""
    dropout: Annotated[float, Fraction] = 0.0
    """Dropout probability in the blocks; 0 for the throughput benchmarks."""
    loss: Loss = "mse"
    """Multi-horizon loss: mse, huber (robust to fat tails; see huber_delta), quantile (pinball over `quantiles`)."""
    huber_delta: Annotated[float, Positive] = 1.0
    """Huber loss: errors below this (in target units, ~1 std after scaling) are squared, above it linear."""
    quantiles: list[Annotated[float, Range(gt=0, lt=1)]] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    """Quantile levels predicted with `loss = "quantile"` (one output per horizon and level)."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments passed to a `module:factory` model (a TOML table); a built-in model takes none (an error)."""


@dataclass
class DataConfig:
    """Where batches come from (docs/data.md)."""

    source: str = "synthetic"
    """synthetic (an in-process market simulator), store (an ingested store, see `store`), or `module:factory`,
    which imports `module` and calls factory(cfg=, batch_size=, **kwargs) for a stride.data.DataBundle."""
    n_assets: Annotated[int, Positive] = 8
    """Synthetic source: number of assets simulated."""
    n_steps: Annotated[int, Positive] = 8192
    """Synthetic source: timesteps per asset."""
    seq_len: Annotated[int, Positive] = 64
    """Timesteps of history in each window (the model's input length; tokens = seq_len / model.patch_len)."""
    horizons: Annotated[list[Annotated[int, Positive]], Length(min=1)] = field(default_factory=lambda: [1, 5, 20])
    """Forecast horizons in timesteps: one target (forward log return) per horizon."""
    val_fraction: Annotated[float, Range(gt=0, lt=1)] = 0.1
    """Share of time (the latest) held out for validation."""
    seed: Annotated[int, Seed] = 0
    """Seed of the synthetic market and of the batch order (an integer from 0 to 2**63 - 1)."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments passed to a `module:factory` data source (a TOML table); synthetic and store take none."""
    store: str = ""
    """Store source: the directory `stride data ingest` wrote; a relative path is read from the current directory,
    not the config's folder."""
    columns: list[str] = field(default_factory=list)
    """Store source: feature columns the model sees, in this order; empty: every column."""
    target_column: str = "close"
    """Store source: the price column; targets are its forward log returns over `horizons`."""
    normalize: Normalize = "train"
    """Store source: none; train (per-column mean/std of the training split); expanding or rolling (causal, per
    symbol, each row's statistics from the rows up to and including it). The synthetic source's features are
    already scaled and take none."""
    normalize_window: Annotated[int, NonNegative] = 0
    """Rows in each rolling window (>= 2), with `normalize = "rolling"` only."""
    embargo: Annotated[int, Range(ge=-1)] = -1
    """Rows between the last row a training target uses and the first validation (and test) window end; -1: the
    largest horizon. 0 still keeps every validation target off the training targets' rows."""
    test_fraction: Annotated[float, Fraction] = 0.0
    """Share of time held out after validation, for a final test (the trainer never reads it); both sources."""
    cross_days: bool = False
    """Let windows span a day boundary (store source); false keeps history and target inside one UTC day."""
    batch_dtype: BatchDtype = "float32"
    """Dtype of the feature windows handed out (store source; targets stay float32): bfloat16 moves half the bytes."""
    prefetch: Literal["auto"] | Annotated[int, NonNegative] = "auto"
    """Batches built ahead in a background thread; 0: built in the step; auto: 2 where a measured probe finds a
    free core and a batch that costs the main thread at least twice as much to build as to take from the thread,
    else 0 (docs/data.md, `stride data probe`)."""
    pin_memory: bool = True
    """Pin batches in host memory for non-blocking copies to the GPU (CUDA only)."""
    resident_mb: Annotated[float, NonNegative] = 0.0
    """MiB of mapped store pages after which they are unmapped (RSS stays flat; pages stay cached); 0: never."""
    gather_threads: Literal["auto"] | Annotated[int, Positive] = "auto"
    """Threads copying each batch of windows; auto: 1, or more where cores are free and the probe measured them
    faster (a GPU host's spare cores)."""
    device_resident: Literal["auto"] | bool = "auto"
    """Keep the training split on the device and gather windows there (one index kernel a batch: no host copy,
    no staging, no data wait); the same batches. auto: on for a CUDA device when the split fits in a quarter of
    the free device memory."""


@dataclass
class OptimConfig:
    """The optimizer and its learning-rate schedule."""

    name: OptimName = "adamw"
    """adamw (torch), sgd, adamw_triton (one fused launch on GPU), adamw8bit (~2 B of state per parameter
    instead of 8), adafactor (factored second moments). adamw8bit and adafactor need whole parameters: not with
    parallel.dp_shard or parallel.tp > 1."""
    lr: Annotated[float, Positive] = 1e-3
    """Peak learning rate, reached after the warm-up."""
    weight_decay: Annotated[float, NonNegative] = 0.01
    """Decoupled weight decay (AdamW); L2 for sgd."""
    betas: Annotated[list[Annotated[float, Fraction]], Length(2, 2)] = field(default_factory=lambda: [0.9, 0.95])
    """Adam's moment decay rates (beta1, beta2)."""
    eps: Annotated[float, Positive] = 1e-8
    """Adam's denominator term."""
    momentum: Annotated[float, Fraction] = 0.9
    """SGD momentum (sgd only)."""
    impl: OptimImpl = "auto"
    """torch's implementation: auto (fused for AdamW, 2.6-5.6x foreach's step on CPU, by host and threads: README;
    foreach for SGD), foreach, fused, for-loop."""
    warmup_steps: Annotated[int, NonNegative] = 20
    """Steps of linear warm-up from lr / warmup_steps to lr."""
    schedule: Schedule = "cosine"
    """After the warm-up: cosine decay to min_lr_ratio x lr at the last step, or constant."""
    min_lr_ratio: Annotated[float, Range(gt=0, le=1)] = 0.1
    """Final learning rate as a fraction of lr (cosine schedule)."""


@dataclass
class TrainConfig:
    """The loop and the efficiency switches applied to the model from outside."""

    steps: Annotated[int, Positive] = 200
    """Optimizer steps to run (a resumed run counts from its checkpoint's step)."""
    batch_size: Annotated[int, Positive] = 64
    """Global batch in samples (all ranks together), split into grad_accum micro-batches."""
    grad_accum: Annotated[int, Positive] = 1
    """Micro-batches per optimizer step: the same update in less activation memory, one gradient sync per step.
    Each micro-batch's mean loss is weighted by its share of the rows: a loss that averages over the valid tokens
    only (ignore_index padding) gives the row-weighted mean of the micro-batches' means, not the token mean."""
    precision: Precision = "fp32"
    """Autocast dtype: bf16 (no loss scaling needed), fp16 (dynamic loss scaling); parameters stay fp32. fp32 on
    CUDA multiplies in TF32 (`allow_tf32`, set for the process: 3e-4 relative error against float64 on an H200,
    MFU then read against the TF32 peak)."""
    grad_clip: Annotated[float, Positive] | None = 1.0
    """Clip the global gradient L2 norm to this; None: no clipping (and no norm computed)."""
    activation_checkpointing: ActivationCheckpointing = "none"
    """Recompute blocks in backward instead of keeping their activations: full (every block) or every_k."""
    ac_every: Annotated[int, Positive] = 2
    """With activation_checkpointing = every_k: checkpoint every k-th block."""
    compile: Compile = "off"
    """torch.compile the model, or the model and the optimizer step (first steps pay the compile time)."""
    kernels: Kernels = "torch"
    """Norms, SwiGLU, RoPE and the loss as torch ops, fused Triton kernels (GPU), or torch.compile'd references."""
    device: Annotated[str, Matches(r"auto|cpu|cuda(:\d+)?", "auto, cpu, cuda or cuda:N")] = "auto"
    """auto (cuda if available), cpu, cuda or cuda:N; under a launcher each rank takes cuda:LOCAL_RANK."""
    seed: Annotated[int, Seed] = 0
    """Seed of torch, NumPy and Python's RNGs (model initialisation, dropout); an integer from 0 to 2**63 - 1."""
    deterministic: bool = False
    """Deterministic algorithms only (torch.use_deterministic_algorithms): bitwise repeatable runs, maybe slower."""
    val_every: Annotated[int, NonNegative] = 50
    """Steps between validations (and at the last step); 0: never validate."""
    val_batches: Annotated[int, Positive] = 8
    """Validation batches per validation."""
    target_val_loss: float | None = None
    """Stop when the validation loss reaches this (time to target in summary.json); None: run every step."""
    threads: Annotated[int, Positive] | None = None
    """torch intra-op threads per process; None keeps torch's default (all cores; 1 per rank under --nproc). More
    threads than the process's usable cores (os.sched_getaffinity) is a warning: they contend and slow each step."""
    name: Annotated[str, Matches(rf"[^/{NAME_CHARS}]+", "a name without /, control characters or bidirectional "
                                 "overrides (it ends the run directory's name)"),
                     MaxBytes(200, "the run directory's name (<stamp>-<name>) must fit a file name's 255")] = "run"
    """Name of the run: the run directory's suffix and the progress bar's label."""

    @property
    def validates(self) -> bool:
        """Whether the run validates at all (`val_every` 0: never): the data it builds need no validation split."""
        return self.val_every > 0


@dataclass
class ParallelConfig:
    """Degrees of each parallelism on one DeviceMesh (docs/parallel.md); their product is the world size.

    With every degree 1 under a launcher of N processes, dp_replicate becomes N (plain DDP). A key set for a
    parallelism the layout does not use (mp_param_dtype without FSDP2, comm_hook without DDP) is named in a notice.
    """

    dp_replicate: Annotated[int, Positive] = 1
    """DDP replicas (or the replicate dimension of HSDP when dp_shard > 1)."""
    dp_shard: Annotated[int, Positive] = 1
    """FSDP2 shards: parameters, gradients and optimizer state split over this many ranks."""
    tp: Annotated[int, Positive] = 1
    """Tensor-parallel ranks: each block's attention heads and MLP split over them (the model declares its plan)."""
    pp: Annotated[int, Positive] = 1
    """Pipeline-parallel ranks: each runs a contiguous slice of the model's blocks."""
    pp_schedule: PipelineSchedule = "1f1b"
    """Pipeline schedule (torch.distributed.pipelining): more stages per rank and zero bubble shrink the idle time."""
    microbatches: Annotated[int, NonNegative] = 0
    """Pipeline microbatches per accumulation step; 0: one per stage (pp x stages per rank)."""
    pp_stages_per_rank: Annotated[int, NonNegative] = 0
    """Model chunks per pipeline rank; 0: 1 (gpipe, 1f1b) or 2 (interleaved_1f1b, zero_bubble, zbv)."""
    backend: Backend = "auto"
    """Process-group backend: auto is nccl on CUDA, gloo on CPU."""
    sequence_parallel: bool = True
    """With tp > 1: norms and the residual stream sharded along time (less activation memory, same bytes sent)."""
    reshard_after_forward: bool = True
    """FSDP2: free gathered parameters after forward (ZeRO-3, less memory) or keep them for backward (ZeRO-2)."""
    mp_param_dtype: LowPrecision = "none"
    """FSDP2 mixed precision: gather and compute parameters in bf16 or fp16 (gradients reduced in fp32)."""
    ddp_bucket_mb: Annotated[float, Positive] = 25.0
    """DDP gradient bucket size in MiB: larger buckets mean fewer all-reduces, later overlap."""
    gradient_as_bucket_view: bool = True
    """DDP: gradients alias the communication buckets (no copy, less memory)."""
    static_graph: bool = False
    """DDP static_graph: the same parameters are used every step (enables some optimisations)."""
    comm_hook: CommHook = "none"
    """DDP gradient compression: fp16 or bf16 casts, powersgd (low rank; one bucket on gloo). Changes the loss."""
    powersgd_rank: Annotated[int, Positive] = 2
    """PowerSGD matrix rank: higher is closer to the exact gradient and sends more."""
    comm_timing: bool = True
    """DDP: time each bucket's all-reduce to split exposed from hidden communication in summary.json."""
    collective_timeout_s: Annotated[float, Positive] = 600.0
    """Seconds a rank may wait in one collective before the job ends, naming the rank, the operation and the step."""
    pin_ranks: Literal["auto"] | bool = "auto"
    """Pin each local rank to cores of its own (`train.threads` cores each, within the launcher's CPU affinity;
    summary.json `rank_pinning`). auto: the CPU ranks of `stride train --nproc N` where N x train.threads fit the
    usable cores (2 ranks on 2 cores: about half the step time, docs/parallel.md); true: any launcher's ranks, GPU
    runs too, where they fit; false: never (several jobs on one host each pin from the first core of its affinity:
    give each its own with taskset, or set false)."""


@dataclass
class CheckpointConfig:
    """DCP checkpoints under `<run dir>/<dir>`, auto-resume, and what to do on faults (docs/checkpoint.md)."""

    enabled: bool = False
    """Save checkpoints and resume from the newest valid one."""
    every: Annotated[int, NonNegative] = 0
    """Steps between saves; 0: only at the end (and on a stop signal)."""
    keep_last: Annotated[int, Positive] = 2
    """Newest checkpoints kept; older ones are deleted after a newer one is committed."""
    keep_every: Annotated[int, NonNegative] = 0
    """Also keep every checkpoint whose step is a multiple of this; 0: none."""
    dir: Annotated[str, Matches(r"(?s).*\S.*", "a folder (relative to the run directory, or absolute)")] = "checkpoints"
    """Where checkpoints go: relative to the run directory, or an absolute path."""
    async_save: bool = False
    """Stage the state to CPU and write it in the background (DCP async_save): the loop stalls for the copy only."""
    staging: Staging = "auto"
    """Async saves' CPU copy: loop (the step waits), background (a thread, until the next optimizer step), auto:
    background, except on a CPU node whose ranks take every core (there it slowed DDP steps 6-7 %)."""
    resume: Resume = "auto"
    """auto: continue from the newest valid checkpoint in `dir`, if any; never: start fresh."""
    force_resume: bool = False
    """Resume even when the checkpoint was written with a config that differs in what is trained."""
    verify: Verify = "checksum"
    """Before loading: check every file's XXH3-128 checksum, or only its size (faster on huge checkpoints)."""
    save_at_end: bool = True
    """Save after the last step."""
    save_on_signal: bool = True
    """SIGTERM / SIGUSR1: every rank saves the same step, then exits 0 (run the same command to resume)."""
    nan_rollback_after: Annotated[int, NonNegative] = 3
    """Non-finite steps in a row (each skipped) after which the run rolls back to the last checkpoint; 0: never."""
    max_rollbacks: Annotated[int, NonNegative] = 3
    """Rollbacks after which the run fails instead of looping."""
    spike_threshold: Annotated[float, Range(gt=1)] | None = None
    """A loss above this multiple of the running median is a spike; None: no spike detection."""
    spike_window: Annotated[int, Positive] = 50
    """Steps in the running median of the loss."""
    spike_action: SpikeAction = "log"
    """On a spike: log it, skip the update, or roll back to the last checkpoint."""


@dataclass
class MetricsConfig:
    """What the run records beside training, and where."""

    log_every: Annotated[int, Positive] = 10
    """Steps between metrics.jsonl records (and progress lines); the last step is always logged."""
    progress: bool = True
    """A progress bar on a terminal, log lines elsewhere."""
    out_dir: str = "runs"
    """Parent of run directories `<out_dir>/<stamp>-<train.name>` (`--out` names the run directory itself)."""
    flops: bool = True
    """Count FLOPs once (torch.utils.flop_counter) for MFU."""
    skip_steps: Annotated[int, NonNegative] = 3
    """Warm-up steps left out of throughput and the breakdown (compile, allocator); a run of no more steps times them
    all, and its summary.json `timing_note` and console say so."""
    peak_flops: Annotated[float, Positive] | None = None
    """Peak FLOP/s used for MFU; None: the datasheet (GPUs) or a measured 1024^3 matmul (CPU)."""
    tensorboard: bool = False
    """TensorBoard scalars under <run dir>/tensorboard."""
    prometheus: bool = False
    """Serve /metrics for a Prometheus scraper while training."""
    prometheus_host: Annotated[str, Matches(r"[A-Za-z0-9._:%-]{1,253}", "an address to bind: a host name or an IP "
                                            "address (127.0.0.1: localhost)")] = "127.0.0.1"
    """Address the endpoint binds: localhost unless told otherwise."""
    prometheus_port: Annotated[int, Range(ge=0, le=65535)] = 0
    """Port of the endpoint; 0: a free one, written to <run dir>/prometheus.json."""
    system_sample_s: Annotated[float, NonNegative] = 1.0
    """Seconds between samples of CPU, RSS and NVML GPU health (<run dir>/system.jsonl); 0: off."""
    mlflow: bool = False
    """Log to MLflow (the `mlflow` extra): the config as params, each metrics.jsonl record, summary.json; rank 0."""
    mlflow_tracking_uri: Annotated[str, Matches(rf"[^\s{NAME_CHARS}]*", "a tracking URI without spaces or control "
                                                "characters, or empty")] = ""
    """Where MLflow runs go: a server (http://host:5000), databricks, file:/path; empty: <run dir>/mlflow."""
    mlflow_experiment: Annotated[str, Matches(rf"(?=.*\S)[^{NAME_CHARS}]{{1,500}}", "an experiment name of at most 500 "
                                              "characters (MLflow's limit), without control characters or "
                                              "bidirectional overrides")] = "stride"
    """The MLflow experiment runs are logged under (made if missing)."""
    wandb: bool = False
    """Log to Weights & Biases (the `wandb` extra), the same content as MLflow, under <run dir>/wandb; rank 0."""
    wandb_mode: WandbMode = "offline"
    """offline: written to <run dir>/wandb only (`wandb sync` uploads it later); online: live (after `wandb login`)."""
    wandb_project: Annotated[str, Matches(rf"[^/\\#?%:\s{NAME_CHARS}]{{1,128}}",
                                          "a W&B project name of at most 128 characters (W&B's limit; no spaces, "
                                          "control characters, /\\#?%:)")] = "stride"
    """The W&B project runs are logged under."""
    wandb_name: Annotated[str, Matches(rf"[^{NAME_CHARS}]*", "a run name without control characters or "
                                       "bidirectional overrides, or empty")] = ""
    """The W&B run's display name; empty: train.name."""


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
