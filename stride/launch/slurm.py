"""Slurm: an sbatch script that runs torchrun on every node and survives preemption.

One srun task per node starts torchrun; the first node of the allocation hosts the c10d
rendezvous. Preemption: `--signal=B:USR1@120` sends SIGUSR1 to the batch shell (B:) two minutes before the
time limit; its trap forwards SIGUSR1 to the training step (`scancel --signal=USR1 JOB.0`, every
node), where torchrun ignores it (each task starts torchrun with SIGUSR1 ignored, which its workers
inherit until the checkpoint callback installs its handler) and each worker saves a checkpoint at the
end of its step and exits 0. The trap waits for the step, then `scontrol requeue`s the job. (A
SIGTERM to every process of the step, which torchrun also forwards, checkpoints as well: a worker takes
copies of a stop signal within 5 s as one request; torchrun's agent, though, would die of SIGUSR1.)
The job id, and so the run directory, stay the same across attempts, and
`checkpoint.resume = "auto"` picks the newest checkpoint there.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from stride.config import ConfigError
from stride.files.input_file import not_found_or_special
from stride.launch.script_values import RESUME_SETS, check_all, check_value, sbatch_directive

TIME_RE = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")  # Slurm's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S


@dataclass
class SlurmJob:
    config: Path
    nodes: int = 1
    gpus_per_node: int = 0
    procs_per_node: int | None = None  # torchrun processes per node; default gpus_per_node (1 on CPU)
    partition: str | None = None
    time: str | None = None
    job_name: str = "stride"
    cpus_per_task: int | None = None
    out_dir: Path = Path("runs")
    signal_lead_s: int = 120
    rdzv_port: int = 29500
    python: str = sys.executable
    overrides: list[str] = field(default_factory=list)
    extra_sbatch: list[str] = field(default_factory=list)  # more "#SBATCH" options, e.g. "--account=abc"

    def check(self) -> None:
        if self.nodes < 1:
            raise ConfigError(f"--nodes = {self.nodes} must be >= 1")
        if self.gpus_per_node < 0:
            raise ConfigError(f"--gpus-per-node = {self.gpus_per_node} must be >= 0")
        if self.procs_per_node is not None and self.procs_per_node < 1:
            raise ConfigError(f"--procs-per-node = {self.procs_per_node} must be >= 1")
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise ConfigError(f"--cpus-per-task = {self.cpus_per_task} must be >= 1")
        if self.time is not None and not TIME_RE.fullmatch(check_value(self.time, "--time")):
            raise ConfigError(f"--time = {self.time!r} is not a Slurm time (minutes, H:M:S or D-H:M:S)")
        if self.signal_lead_s < 1:
            raise ConfigError(f"--signal-lead = {self.signal_lead_s} must be >= 1 second")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", self.job_name):
            raise ConfigError(f"--job-name = {self.job_name!r}: use letters, digits, '.', '_' or '-'")
        if not re.fullmatch(r"[A-Za-z0-9_.,-]+", check_value(self.partition or "x", "--partition")):
            raise ConfigError(f"--partition = {self.partition!r}: use letters, digits, '.', '_', '-' "
                              "(',' between several)")
        for o in self.extra_sbatch:
            if not sbatch_directive(o, "--sbatch").lstrip("'").startswith("-"):
                raise ConfigError(f"--sbatch = {o!r} is not an sbatch option (e.g. --sbatch=--account=abc)")
        sbatch_directive(str(self.out_dir), "--out-dir")  # it goes into #SBATCH --output=
        check_value(self.python, "the Python interpreter path")
        check_all(self.overrides, "--set")
        if not self.config.is_file():
            check_value(self.config, "the config path")
            raise ConfigError(f"config file {not_found_or_special(self.config)}" if self.config.exists()
                              else f"config file not found: {self.config}")  # a FIFO or a device: say which
        check_value(self.config.resolve(), "the config path")

    @property
    def nproc(self) -> int:
        return self.procs_per_node or (self.gpus_per_node or 1)


def render_sbatch(job: SlurmJob) -> str:
    """The batch script as text (what `--dry-run` prints and `sbatch` receives)."""
    job.check()
    config = job.config.resolve()
    out_dir = job.out_dir.resolve()
    q = shlex.quote
    sb = [f"--job-name={job.job_name}", f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    if job.gpus_per_node:
        sb.append(f"--gpus-per-node={job.gpus_per_node}")
    if job.cpus_per_task:
        sb.append(f"--cpus-per-task={job.cpus_per_task}")
    if job.partition:
        sb.append(f"--partition={job.partition}")
    if job.time:
        sb.append(f"--time={job.time}")
    sb += [f"--output={out_dir}/slurm-%x-%j.out", "--open-mode=append",
           f"--signal=B:USR1@{job.signal_lead_s}", "--requeue", *job.extra_sbatch]
    sets = [*RESUME_SETS, *job.overrides]
    torchrun = [
        f"{q(job.python)} -m torch.distributed.run",
        f'--nnodes="$SLURM_NNODES" --nproc-per-node={job.nproc}',
        '--rdzv-backend=c10d --rdzv-endpoint="$HEAD_NODE:$RDZV_PORT" --rdzv-id="$SLURM_JOB_ID"',
        f'-m stride.cli.main train {q(str(config))} --out "$RUN_DIR" --no-progress',
        *[f"--set {q(o)}" for o in sets],
    ]
    lines = ["#!/bin/bash", *[f"#SBATCH {sbatch_directive(o, 'an #SBATCH option')}" for o in sb], "",
             "# Generated by `stride launch slurm`. One srun task per node runs torchrun; the first node hosts",
             "# the rendezvous. SIGUSR1 (sent to this shell before the time limit or a preemption) checkpoints",
             "# and requeues; the next attempt resumes from the newest checkpoint in the same run directory.",
             "set -uo pipefail",
             f"RUN_DIR={q(str(out_dir))}/{job.job_name}-\"$SLURM_JOB_ID\"",
             'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
             f"RDZV_PORT={job.rdzv_port}",
             "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1  # gloo re-init after a restart (pytorch#135712)",
             'echo "stride: job $SLURM_JOB_ID attempt ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST, '
             'rendezvous $HEAD_NODE:$RDZV_PORT, run dir $RUN_DIR"',
             "",
             "requeue() {",
             '  echo "stride: SIGUSR1: checkpointing and requeueing job $SLURM_JOB_ID"',
             '  scancel --signal=USR1 "$SLURM_JOB_ID.0"  # every worker: checkpoint at the step end, exit 0',
             '  wait "$SRUN_PID"',
             '  scontrol requeue "$SLURM_JOB_ID"',
             "  exit 0",
             "}",
             "trap requeue USR1",
             "",
             "# torchrun (and its workers, until stride installs its handler) ignore SIGUSR1.",
             "srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'trap \"\" USR1; exec \"$@\"' stride-task \\",
             "  " + " \\\n  ".join(torchrun) + " &",
             "SRUN_PID=$!",
             'wait "$SRUN_PID"  # returns early when SIGUSR1 arrives; the trap then takes over',
             "rc=$?",
             'echo "stride: training exited with $rc"',
             "exit $rc",
             ""]
    return "\n".join(lines)


def submit(script: str, path: Path) -> str:
    """Write the script to `path` and sbatch it; returns the job id."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    try:
        out = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise ConfigError("sbatch not found: run on a Slurm login node, or use --dry-run to see the script") from exc
    if out.returncode != 0:
        raise ConfigError(f"sbatch {path} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0]
