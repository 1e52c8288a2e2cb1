"""The typed run config: one object that flows through every stride command.

Each section is a frozen-free dataclass so commands can read fields with attribute access and
type checkers see every key. Validation of types and values lives in `loader.py`; the checks
that relate several fields live in `validate.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelConfig:
    """What to train. `name` is a registered workload or a `module:factory` string."""

    name: str = "ts_transformer"
    size: str = "tiny"
    # Optional overrides of the named size (None keeps the size's value).
    d_model: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    ffn_mult: float | None = None
    patch_len: int = 1  # 1: one token per timestep; >1: non-overlapping patches
    causal: bool = True
    dropout: float = 0.0
    loss: str = "mse"  # mse | huber | quantile
    huber_delta: float = 1.0
    quantiles: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    kwargs: dict = field(default_factory=dict)  # passed to a `module:factory` model


@dataclass
class DataConfig:
    """Where batches come from. `source` is `synthetic` or a `module:factory` string."""

    source: str = "synthetic"
    n_assets: int = 8
    n_steps: int = 8192  # timesteps per asset
    seq_len: int = 64
    horizons: list[int] = field(default_factory=lambda: [1, 5, 20])
    val_fraction: float = 0.1
    seed: int = 0
    kwargs: dict = field(default_factory=dict)  # passed to a `module:factory` data source
    # Ingested store (`source = "store"`, see docs/data.md).
    store: str = ""  # directory made by `stride data ingest`
    columns: list[str] = field(default_factory=list)  # feature columns; empty: every column
    target_column: str = "close"  # price column; targets are its forward log returns
    normalize: str = "train"  # none | train (fitted on the train split) | expanding | rolling (causal, per symbol)
    normalize_window: int = 0  # rows in each rolling statistics window (normalize = "rolling" only; >= 2)
    embargo: int = -1  # rows between the last train target and the first validation end; -1: max horizon
    test_fraction: float = 0.0  # held out after validation (not used by the trainer)
    cross_days: bool = False  # let windows span a day boundary
    batch_dtype: str = "float32"  # float32 | bfloat16: feature windows handed out (store source; targets float32)
    # Loader (both sources).
    prefetch: int = 2  # batches built ahead in a background thread; 0: none
    pin_memory: bool = True  # pin batches for non_blocking host-to-device copies (CUDA only)
    resident_mb: float = 0.0  # unmap a store's pages once its mapped pages pass this many MiB (flat RSS); 0: never
    gather_threads: int = 1  # threads gathering each batch of windows (store source); >1 for many-core hosts


@dataclass
class OptimConfig:
    name: str = "adamw"  # adamw | sgd | adamw_triton | adamw8bit | adafactor (stride.optim.factory)
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    momentum: float = 0.9  # sgd only
    impl: str = "auto"  # auto | foreach | fused | for-loop
    warmup_steps: int = 20
    schedule: str = "cosine"  # cosine | constant
    min_lr_ratio: float = 0.1


@dataclass
class TrainConfig:
    steps: int = 200
    batch_size: int = 64  # global batch, split into grad_accum micro-batches
    grad_accum: int = 1
    precision: str = "fp32"  # fp32 | bf16 | fp16
    grad_clip: float | None = 1.0
    activation_checkpointing: str = "none"  # none | full | every_k
    ac_every: int = 2  # with activation_checkpointing = every_k
    compile: str = "off"  # off | model | model+optimizer
    kernels: str = "torch"  # torch | triton | compile
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    seed: int = 0
    deterministic: bool = False
    val_every: int = 50
    val_batches: int = 8
    target_val_loss: float | None = None
    threads: int | None = None  # torch intra-op threads; None keeps torch's default
    name: str = "run"


@dataclass
class ParallelConfig:
    """Degrees of each parallelism on one DeviceMesh (stride.parallel); their product is the world size.

    With every degree 1 under a launcher of N processes, dp_replicate becomes N (plain DDP).
    """

    dp_replicate: int = 1  # DDP (or the replicate dim of HSDP when dp_shard > 1)
    dp_shard: int = 1  # FSDP2 fully_shard
    tp: int = 1  # tensor parallel (parallelize_module), sequence parallel for norms
    pp: int = 1  # pipeline-parallel ranks (stride.parallel.pipeline): each runs a slice of model.blocks
    pp_schedule: str = "1f1b"  # gpipe | 1f1b | interleaved_1f1b | zero_bubble | zbv (torch.distributed.pipelining)
    microbatches: int = 0  # pipeline microbatches per accumulation step; 0 = one per stage (pp x stages per rank)
    pp_stages_per_rank: int = 0  # model chunks per rank; 0 = 1 (gpipe, 1f1b) or 2 (interleaved_1f1b, zero_bubble, zbv)
    backend: str = "auto"  # auto (nccl on CUDA, gloo on CPU) | gloo | nccl
    sequence_parallel: bool = True  # with tp > 1: norms and the residual stream sharded along time
    reshard_after_forward: bool = True  # FSDP2: free gathered params after forward (ZeRO-3) or keep (ZeRO-2)
    mp_param_dtype: str = "none"  # FSDP2 MixedPrecisionPolicy param dtype: none | bf16 | fp16 (reduce in fp32)
    ddp_bucket_mb: float = 25.0  # DDP gradient bucket size
    gradient_as_bucket_view: bool = True  # DDP: grads alias the buckets (no copy, less memory)
    static_graph: bool = False  # DDP static_graph
    comm_hook: str = "none"  # DDP: none | fp16 | bf16 | powersgd (one bucket on gloo)
    powersgd_rank: int = 2  # DDP PowerSGD matrix rank
    comm_timing: bool = True  # DDP: time each bucket's all-reduce to split exposed from hidden comm
    collective_timeout_s: float = 600.0  # a rank blocked this long in a collective ends the job, naming it


@dataclass
class CheckpointConfig:
    """DCP checkpoints under `<run dir>/<dir>`, auto-resume, and what to do on faults (stride.checkpoint)."""

    enabled: bool = False
    every: int = 0  # steps between saves; 0 = only at the end
    keep_last: int = 2
    keep_every: int = 0  # also keep every checkpoint whose step is a multiple of this (0: none)
    dir: str = "checkpoints"  # relative to the run directory (or an absolute path)
    async_save: bool = False  # stage to CPU and write in the background (DCP async_save)
    # async saves' CPU copy: "loop" (the step loop waits for it), "background" (a thread, until the next
    # optimizer step; a model with buffers falls back to the loop), "auto": background, except on a CPU node
    # whose ranks take every core (there the copy slowed DDP steps 6-7 %; docs/checkpoint.md, Async saves)
    staging: str = "auto"
    resume: str = "auto"  # auto: newest valid checkpoint in dir, if any | never
    force_resume: bool = False  # resume even when the checkpoint's config differs
    verify: str = "checksum"  # checksum: check every file's XXH3-128 before loading | size: sizes only
    save_at_end: bool = True
    save_on_signal: bool = True  # SIGTERM / SIGUSR1: final checkpoint, then exit 0
    nan_rollback_after: int = 3  # this many non-finite steps in a row roll back (0: never roll back)
    max_rollbacks: int = 3  # then the run fails instead of looping
    spike_threshold: float | None = None  # loss > threshold x running median counts as a spike
    spike_window: int = 50  # steps in the running median
    spike_action: str = "log"  # log | skip | rollback


@dataclass
class MetricsConfig:
    log_every: int = 10
    progress: bool = True
    out_dir: str = "runs"
    flops: bool = True  # count FLOPs once with torch.utils.flop_counter for MFU
    skip_steps: int = 3  # warm-up steps left out of throughput and breakdown (compile, allocator)
    peak_flops: float | None = None  # override the device peak (FLOP/s) used for MFU
    # Observers (stride.metrics.observe), beside metrics.jsonl.
    tensorboard: bool = False  # TensorBoard scalars under <run dir>/tensorboard
    prometheus: bool = False  # serve /metrics for a Prometheus scraper while training
    prometheus_host: str = "127.0.0.1"  # localhost unless told otherwise
    prometheus_port: int = 0  # 0: pick a free port (written to <run dir>/prometheus.json)
    system_sample_s: float = 1.0  # CPU/RSS (and NVML where present) sampling period; 0: off


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
