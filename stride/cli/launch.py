"""`stride launch slurm|k8s|ray CONFIG ...`: submit to a scheduler, print what would be submitted, or run on Ray."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="TOML run config")
    p.add_argument("--nodes", type=int, default=1, help="nodes (Slurm) or pods (k8s) (default: %(default)s)")
    p.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node; 0 runs on CPU (default: %(default)s)")
    p.add_argument("--procs-per-node", type=int, default=None,
                   help="torchrun processes per node (default: --gpus-per-node, or 1 on CPU)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override passed to `stride train` (repeatable)")


def register(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="scheduler", metavar="SCHEDULER", required=True)
    s = sub.add_parser("slurm", help="write and sbatch a job script (srun + torchrun, requeue on preemption)")
    _common(s)
    s.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default partition)")
    s.add_argument("--time", default=None, help="Slurm time limit, e.g. 04:00:00")
    s.add_argument("--job-name", default="stride",
                   help="Slurm job name; also names the script and the run directory (default: %(default)s)")
    s.add_argument("--cpus-per-task", type=int, default=None,
                   help="CPUs per node for its torchrun task and workers (default: Slurm's default)")
    s.add_argument("--signal-lead", type=int, default=120,
                   help="seconds before the limit to get SIGUSR1 (default: %(default)s)")
    s.add_argument("--out-dir", type=Path, default=Path("runs"),
                   help="run directories and Slurm logs (default: %(default)s)")
    s.add_argument("--sbatch", dest="extra_sbatch", action="append", default=[], metavar="OPTION",
                   help="extra #SBATCH option, e.g. --sbatch=--account=abc (repeatable)")
    s.add_argument("--dry-run", action="store_true", help="print the script instead of submitting it")
    s.set_defaults(func=run_slurm)
    k = sub.add_parser("k8s", help="write a Kubeflow PyTorchJob manifest (with the config in a ConfigMap)")
    _common(k)
    k.add_argument("--name", default="stride", help="job name (DNS-1123 label) (default: %(default)s)")
    k.add_argument("--image", default=None, help="container image with stride installed (default stride:<version>, "
                   "what `docker build -t stride:<version> .` makes from the repository's Dockerfile)")
    k.add_argument("--namespace", default="default", help="Kubernetes namespace of the job (default: %(default)s)")
    k.add_argument("--cpu", default=None, help="CPU limit per pod, e.g. 8")
    k.add_argument("--memory", default=None, help="memory limit per pod, e.g. 32Gi")
    k.add_argument("--pvc", default=None, help="PersistentVolumeClaim for run directories (resume after restarts)")
    k.add_argument("--backoff-limit", type=int, default=3,
                   help="pod restarts before the job is marked failed (default: %(default)s)")
    k.add_argument("--restart-policy", default="OnFailure",
                   help="when a pod restarts: OnFailure, Always, Never or ExitCode (default: %(default)s)")
    k.add_argument("--format", choices=("yaml", "json"), default="yaml",
                   help="manifest format; json writes a v1 List (default: %(default)s)")
    k.add_argument("-o", "--output", type=Path, default=None, help="write here (default: print to stdout)")
    k.set_defaults(func=run_k8s)
    r = sub.add_parser("ray", help="run the trainer inside Ray Train's TorchTrainer "
                       "(needs the ray extra: pip install -e '.[ray]')")
    r.add_argument("config", type=Path, help="TOML run config")
    r.add_argument("--workers", type=int, required=True, help="Ray Train workers, one stride rank each")
    r.add_argument("--address", default=None,
                   help="an existing Ray cluster (auto, HOST:PORT, ray://HOST:10001); default: start one here")
    r.add_argument("--use-gpu", choices=("auto", "true", "false"), default="auto",
                   help="one GPU per worker; auto: when the cluster has enough and train.device allows "
                        "(default: %(default)s)")
    r.add_argument("--cpus-per-worker", type=int, default=1,
                   help="CPUs Ray reserves per worker (and its threads; default: %(default)s)")
    r.add_argument("--max-failures", type=int, default=0,
                   help="times Ray restarts the workers after a failure; each restart resumes from the newest "
                        "checkpoint (-1: unlimited)")
    r.add_argument("--out", type=Path, default=None,
                   help="run directory, shared by every worker (default: <metrics.out_dir>/<stamp>-<name>); "
                        "launching again on it resumes")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override (repeatable)")
    r.add_argument("--json", action="store_true", help="print the summary as one JSON line at the end")
    r.set_defaults(func=run_ray)


def _check_config(config: Path, overrides: list[str], world_size: int, *, in_pod: bool = False) -> None:
    """Load the config as every rank of the job will (the launcher's --set first, then the user's) and check its
    [parallel] layout against the job's `world_size` processes, as `stride train --nproc` does: a typo or a layout
    that does not fit fails here, in one line, before a script is written or a job waits in a queue.

    `in_pod`: the job runs in a container image, which may hold a data store or a `module:factory` this machine
    lacks; the model is then built for its checks only when it is a built-in one on synthetic data.
    """
    from stride.config import load_config
    from stride.launch.preflight import check_before_launch
    from stride.launch.script_values import RESUME_SETS

    cfg = load_config(config, [*RESUME_SETS, *overrides])
    here = not in_pod or (cfg.data.source == "synthetic" and ":" not in cfg.model.name)
    check_before_launch(cfg, world_size, model_here=here)


def _config_missing(config: Path) -> None:
    """A config path that is not there, refused as `stride train` refuses it: where a relative path was looked for
    and a near name (slurm and k8s said only "config file not found: configs/quickstart.toml" from another folder;
    first-contact audit of 2026-12-07)."""
    from stride.config.loader import read_toml

    if not config.exists():
        read_toml(config)  # raises the loader's ConfigError


def run_slurm(args: argparse.Namespace) -> int:
    from stride.launch.slurm import SlurmJob, render_sbatch, submit

    _config_missing(args.config)
    job = SlurmJob(config=args.config, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                   procs_per_node=args.procs_per_node, partition=args.partition, time=args.time,
                   job_name=args.job_name, cpus_per_task=args.cpus_per_task, out_dir=args.out_dir,
                   signal_lead_s=args.signal_lead, overrides=args.overrides, extra_sbatch=args.extra_sbatch)
    script = render_sbatch(job)  # bad options fail first, naming the flag
    _check_config(args.config, args.overrides, job.nodes * job.nproc)
    if args.dry_run:
        sys.stdout.write(script)
        return 0
    path = args.out_dir.resolve() / f"{args.job_name}.sbatch"
    job_id = submit(script, path)
    print(f"submitted batch job {job_id} ({path}); run directory {args.out_dir.resolve()}/{args.job_name}-{job_id}")
    return 0


def run_k8s(args: argparse.Namespace) -> int:
    from stride.config import ConfigError
    from stride.launch.k8s import DEFAULT_IMAGE, K8sJob, build_manifests
    from stride.launch.yaml_writer import dump_yaml

    _config_missing(args.config)
    job = K8sJob(config=args.config, name=args.name, image=args.image or DEFAULT_IMAGE, nodes=args.nodes,
                 gpus_per_node=args.gpus_per_node, procs_per_node=args.procs_per_node, cpu=args.cpu,
                 memory=args.memory, namespace=args.namespace, pvc=args.pvc, backoff_limit=args.backoff_limit,
                 restart_policy=args.restart_policy, overrides=args.overrides)
    docs = build_manifests(job)  # bad options fail first, naming the flag
    _check_config(args.config, args.overrides, job.nodes * job.nproc, in_pod=True)
    text = dump_yaml(docs) if args.format == "yaml" else json.dumps({"apiVersion": "v1", "kind": "List",
                                                                       "items": docs}, indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        if args.output.is_dir() or not args.output.parent.is_dir():  # a usage error, as every other flag's (exit 2)
            raise ConfigError(f"-o {args.output}: " + ("a folder; give a file name in it" if args.output.is_dir()
                                                       else f"its folder {args.output.parent} does not exist"))
        args.output.write_text(text)
        print(f"wrote {args.output} (kubectl apply -f {args.output})")
    return 0


def run_ray(args: argparse.Namespace) -> int:
    from stride.config import load_config
    from stride.launch.ray_train import LAUNCH_DEFAULTS, RayLaunch, RayNotInstalled, RayRunFailed, launch_ray

    cfg = load_config(args.config, [*LAUNCH_DEFAULTS, *args.overrides])
    spec = RayLaunch(workers=args.workers, use_gpu=args.use_gpu, address=args.address,
                     cpus_per_worker=args.cpus_per_worker, max_failures=args.max_failures, out=args.out)

    def started(out: Path, use_gpu: bool) -> None:
        where = args.address or "a local Ray instance"
        print(f"stride launch ray: {args.workers} workers ({'GPU' if use_gpu else 'CPU'}) on {where}; "
              f"run directory {out}", file=sys.stderr, flush=True)

    try:
        outcome = launch_ray(cfg, spec, on_start=started)
    except RayNotInstalled as exc:
        print(f"stride launch ray: {exc}", file=sys.stderr)
        return 2
    except RayRunFailed as exc:
        print(f"stride launch ray: {exc}", file=sys.stderr)
        return 1
    from rich.console import Console

    from stride.report.summary_table import print_summary

    term = Console()
    print_summary(outcome.summary, term if term.is_terminal else Console(width=120))
    print(f"run directory: {outcome.run_dir} (Ray fit {outcome.fit_s:.1f} s)")
    if args.json:
        print(json.dumps({"run_dir": str(outcome.run_dir), "fit_s": outcome.fit_s,
                          "summary_source": outcome.summary_source, "summary": outcome.summary}, default=str))
    return 0
