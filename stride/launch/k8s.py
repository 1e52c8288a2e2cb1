"""Kubernetes: a Kubeflow PyTorchJob (kubeflow.org/v1) that runs `stride train` under torchrun.

The training operator creates one Master and N-1 Worker pods and sets the PET_* variables torchrun
reads (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT); `spec.nprocPerNode` gives
processes per pod. The config travels in a ConfigMap mounted read-only; the run directory goes to
a PersistentVolumeClaim when one is named (so a restarted pod resumes from its checkpoints), else
an emptyDir. `restartPolicy: OnFailure` restarts failed pods; `runPolicy.backoffLimit` bounds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stride import __version__
from stride.config import ConfigError
from stride.launch.script_values import (
    DNS1123_SUBDOMAIN,
    K8S_QUANTITY,
    RESUME_SETS,
    check_all,
    check_pattern,
    check_value,
)

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CONFIG_MOUNT = "/etc/stride"
# What the repository's Dockerfile builds (`docker build -t stride:<version> .`); a versioned tag, not
# `latest`, so Kubernetes uses the image already on a node instead of always pulling one that may not exist.
DEFAULT_IMAGE = f"stride:{__version__}"
RUNS_MOUNT = "/runs"


@dataclass
class K8sJob:
    config: Path
    name: str = "stride"
    image: str = DEFAULT_IMAGE
    nodes: int = 1  # pods: 1 Master + (nodes - 1) Workers
    gpus_per_node: int = 0
    procs_per_node: int | None = None
    cpu: str | None = None  # e.g. "8"
    memory: str | None = None  # e.g. "32Gi"
    namespace: str = "default"
    pvc: str | None = None
    backoff_limit: int = 3
    restart_policy: str = "OnFailure"
    overrides: list[str] = field(default_factory=list)

    def check(self) -> None:
        if not DNS1123.fullmatch(check_value(self.name, "--name")) or len(self.name) > 50:
            raise ConfigError(f"--name = {self.name!r} must be a DNS-1123 label (lower case, digits, '-'), <= 50 chars")
        if self.nodes < 1:
            raise ConfigError(f"--nodes = {self.nodes} must be >= 1")
        if self.gpus_per_node < 0:
            raise ConfigError(f"--gpus-per-node = {self.gpus_per_node} must be >= 0")
        if self.procs_per_node is not None and self.procs_per_node < 1:
            raise ConfigError(f"--procs-per-node = {self.procs_per_node} must be >= 1")
        if self.backoff_limit < 0:
            raise ConfigError(f"--backoff-limit = {self.backoff_limit} must be >= 0")
        if self.restart_policy not in ("OnFailure", "Always", "Never", "ExitCode"):
            raise ConfigError(f"--restart-policy = {self.restart_policy!r} is not one of OnFailure, Always, Never, "
                              "ExitCode")
        if not DNS1123.fullmatch(check_value(self.namespace, "--namespace")) or len(self.namespace) > 63:
            raise ConfigError(f"--namespace = {self.namespace!r} must be a DNS-1123 label")
        check_pattern(self.pvc, DNS1123_SUBDOMAIN, "--pvc", "a PersistentVolumeClaim name (DNS-1123 subdomain)")
        check_pattern(self.cpu, K8S_QUANTITY, "--cpu", "a Kubernetes quantity (e.g. 8, 500m)")
        check_pattern(self.memory, K8S_QUANTITY, "--memory", "a Kubernetes quantity (e.g. 32Gi)")
        if not check_value(self.image, "--image") or any(c.isspace() for c in self.image):
            raise ConfigError(f"--image = {self.image!r} must be an image reference without spaces")
        check_all(self.overrides, "--set")
        if not self.config.is_file():
            raise ConfigError(f"config file not found: {check_value(self.config, 'the config path')}")

    @property
    def nproc(self) -> int:
        return self.procs_per_node or (self.gpus_per_node or 1)


def _container(job: K8sJob) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if job.gpus_per_node:
        limits["nvidia.com/gpu"] = job.gpus_per_node
    if job.cpu:
        limits["cpu"] = job.cpu
    if job.memory:
        limits["memory"] = job.memory
    # torchrun reads --nnodes, --node-rank, --master-addr and --master-port from the PET_* variables
    # the operator sets on every pod; only the per-pod process count is given here.
    args = [f"--nproc-per-node={job.nproc}", "-m",
            "stride.cli.main", "train", f"{CONFIG_MOUNT}/config.toml", "--out", f"{RUNS_MOUNT}/{job.name}",
            "--no-progress"]
    for o in [*RESUME_SETS, *job.overrides]:
        args += ["--set", o]
    return {
        "name": "pytorch",  # the training operator looks for the container of this name
        "image": job.image,
        "command": ["torchrun"],
        "args": args,
        "env": [{"name": "PET_NPROC_PER_NODE", "value": str(job.nproc)},
                {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
                         {"name": "runs", "mountPath": RUNS_MOUNT},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }


def _replica(job: K8sJob, replicas: int) -> dict[str, Any]:
    runs = ({"persistentVolumeClaim": {"claimName": job.pvc}} if job.pvc else {"emptyDir": {}})
    return {
        "replicas": replicas,
        "restartPolicy": job.restart_policy,
        "template": {"spec": {
            "containers": [_container(job)],
            "volumes": [{"name": "config", "configMap": {"name": f"{job.name}-config"}},
                        {"name": "runs", **runs},
                        {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        }},
    }


def build_manifests(job: K8sJob) -> list[dict[str, Any]]:
    """[ConfigMap with the TOML config, PyTorchJob]."""
    job.check()
    meta = {"name": job.name, "namespace": job.namespace, "labels": {"app.kubernetes.io/name": "stride"}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {**meta, "name": f"{job.name}-config"},
          "data": {"config.toml": job.config.read_text()}}
    specs = {"Master": _replica(job, 1)}
    if job.nodes > 1:
        specs["Worker"] = _replica(job, job.nodes - 1)
    pj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
          "spec": {"nprocPerNode": str(job.nproc),
                   "runPolicy": {"backoffLimit": job.backoff_limit, "cleanPodPolicy": "None"},
                   "pytorchReplicaSpecs": specs}}
    return [cm, pj]
