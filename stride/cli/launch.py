"""`stride launch slurm|k8s CONFIG ...`: submit to a scheduler, or print what would be submitted."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="TOML run config")
    p.add_argument("--nodes", type=int, default=1, help="nodes (Slurm) or pods (k8s)")
    p.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node; 0 runs on CPU")
    p.add_argument("--procs-per-node", type=int, default=None,
                   help="torchrun processes per node (default: --gpus-per-node, or 1 on CPU)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override passed to `stride train` (repeatable)")


def register(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="scheduler", metavar="SCHEDULER", required=True)
    s = sub.add_parser("slurm", help="write and sbatch a job script (srun + torchrun, requeue on preemption)")
    _common(s)
    s.add_argument("--partition", default=None)
    s.add_argument("--time", default=None, help="Slurm time limit, e.g. 04:00:00")
    s.add_argument("--job-name", default="stride")
    s.add_argument("--cpus-per-task", type=int, default=None)
    s.add_argument("--signal-lead", type=int, default=120, help="seconds before the limit to get SIGUSR1")
    s.add_argument("--out-dir", type=Path, default=Path("runs"), help="run directories and Slurm logs")
    s.add_argument("--sbatch", dest="extra_sbatch", action="append", default=[], metavar="OPTION",
                   help="extra #SBATCH option, e.g. --sbatch=--account=abc (repeatable)")
    s.add_argument("--dry-run", action="store_true", help="print the script instead of submitting it")
    s.set_defaults(func=run_slurm)
    k = sub.add_parser("k8s", help="write a Kubeflow PyTorchJob manifest (with the config in a ConfigMap)")
    _common(k)
    k.add_argument("--name", default="stride", help="job name (DNS-1123 label)")
    k.add_argument("--image", default="stride:latest", help="container image with stride installed")
    k.add_argument("--namespace", default="default")
    k.add_argument("--cpu", default=None, help="CPU limit per pod, e.g. 8")
    k.add_argument("--memory", default=None, help="memory limit per pod, e.g. 32Gi")
    k.add_argument("--pvc", default=None, help="PersistentVolumeClaim for run directories (resume after restarts)")
    k.add_argument("--backoff-limit", type=int, default=3)
    k.add_argument("--restart-policy", default="OnFailure")
    k.add_argument("--format", choices=("yaml", "json"), default="yaml")
    k.add_argument("-o", "--output", type=Path, default=None, help="write here (default: print to stdout)")
    k.set_defaults(func=run_k8s)


def run_slurm(args: argparse.Namespace) -> int:
    from stride.launch.slurm import SlurmJob, render_sbatch, submit

    job = SlurmJob(config=args.config, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                   procs_per_node=args.procs_per_node, partition=args.partition, time=args.time,
                   job_name=args.job_name, cpus_per_task=args.cpus_per_task, out_dir=args.out_dir,
                   signal_lead_s=args.signal_lead, overrides=args.overrides, extra_sbatch=args.extra_sbatch)
    script = render_sbatch(job)
    if args.dry_run:
        sys.stdout.write(script)
        return 0
    path = args.out_dir.resolve() / f"{args.job_name}.sbatch"
    job_id = submit(script, path)
    print(f"submitted batch job {job_id} ({path}); run directory {args.out_dir.resolve()}/{args.job_name}-{job_id}")
    return 0


def run_k8s(args: argparse.Namespace) -> int:
    from stride.launch.k8s import K8sJob, build_manifests
    from stride.launch.yaml_writer import dump_yaml

    job = K8sJob(config=args.config, name=args.name, image=args.image, nodes=args.nodes,
                 gpus_per_node=args.gpus_per_node, procs_per_node=args.procs_per_node, cpu=args.cpu,
                 memory=args.memory, namespace=args.namespace, pvc=args.pvc, backoff_limit=args.backoff_limit,
                 restart_policy=args.restart_policy, overrides=args.overrides)
    docs = build_manifests(job)
    text = dump_yaml(docs) if args.format == "yaml" else json.dumps({"apiVersion": "v1", "kind": "List",
                                                                       "items": docs}, indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(f"wrote {args.output} (kubectl apply -f {args.output})")
    return 0
