"""`stride launch k8s`: the PyTorchJob manifest validates against a schema written from the CRD; YAML round-trips."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import ConfigError
from stride.launch.k8s import K8sJob, build_manifests
from stride.launch.yaml_writer import dump_yaml

SCHEMA = Path(__file__).with_name("pytorchjob_schema.json")
# jsonschema and PyYAML are installed for the venv's base interpreter, not in the venv: run them there.
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
VALIDATE = """
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
          for e in jsonschema.Draft202012Validator(schema).iter_errors(json.load(sys.stdin))]
print(json.dumps(errors))
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text('[train]\nsteps = 6\nname = "k8s test"\n')
    return p


def base_python(modules: str, code: str, stdin: str, *args: str) -> str:
    probe = subprocess.run([BASE_PYTHON, "-c", f"import {modules}"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"{modules} not importable by {BASE_PYTHON}: cannot check the manifest with them")
    return subprocess.run([BASE_PYTHON, "-c", code, *args], input=stdin, capture_output=True, text=True,
                          timeout=60, check=True).stdout


def schema_errors(doc: dict) -> list[str]:
    return json.loads(base_python("jsonschema", VALIDATE, json.dumps(doc), str(SCHEMA)))


def yaml_load_all(text: str) -> list:
    """PyYAML's safe loader reads the documents; they come back as JSON."""
    code = "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))"
    return json.loads(base_python("yaml", code, text))


def test_two_node_gpu_job_validates(config: Path) -> None:
    cm, pj = build_manifests(K8sJob(config=config, name="trend-run", image="reg/stride:1", nodes=3, gpus_per_node=8,
                                    cpu="32", memory="200Gi", pvc="stride-runs", overrides=["optim.lr=3e-4"]))
    assert schema_errors(pj) == []
    specs = pj["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    assert pj["spec"]["nprocPerNode"] == "8" and pj["spec"]["runPolicy"]["backoffLimit"] == 3
    (c,) = specs["Worker"]["template"]["spec"]["containers"]
    assert c["command"] == ["torchrun"] and c["args"][0] == "--nproc-per-node=8"
    assert c["args"][-2:] == ["--set", "optim.lr=3e-4"] and "checkpoint.resume=auto" in c["args"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 8, "cpu": "32", "memory": "200Gi"}
    assert {"name": "PET_NPROC_PER_NODE", "value": "8"} in c["env"]
    vols = {v["name"]: v for v in specs["Master"]["template"]["spec"]["volumes"]}
    assert vols["runs"]["persistentVolumeClaim"] == {"claimName": "stride-runs"}
    assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"] == "trend-run-config"
    assert cm["data"]["config.toml"] == config.read_text()


def test_schema_rejects_what_the_operator_would(config: Path) -> None:
    _, pj = build_manifests(K8sJob(config=config))
    assert "Worker" not in pj["spec"]["pytorchReplicaSpecs"]  # one node: Master only
    assert schema_errors(pj) == []
    pj["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "Sometimes"
    pj["spec"]["runPolicy"]["cleanPodPolicy"] = "Everything"
    errs = schema_errors(pj)
    assert len(errs) == 2 and any("restartPolicy" in e for e in errs) and any("cleanPodPolicy" in e for e in errs)


def test_yaml_round_trips(config: Path) -> None:
    docs = build_manifests(K8sJob(config=config, nodes=2))
    tricky = {"on": "yes", "n": "08", "x": "1e3", "list": [], "map": {}, "none": None, "t": True, "f": 1.5,
              "nested": [{"a": [1, "two"]}, [3]]}
    text = dump_yaml([*docs, tricky])
    assert yaml_load_all(text) == [*docs, tricky]


def test_cli_writes_yaml_and_json(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    assert main(["launch", "k8s", str(config), "--nodes", "2", "--name", "abc", "-o", str(out)]) == 0
    cm, pj = yaml_load_all(out.read_text())
    assert pj["metadata"]["name"] == "abc" and pj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert main(["launch", "k8s", str(config), "--format", "json", "-o", str(tmp_path / "job.json")]) == 0
    lst = json.loads((tmp_path / "job.json").read_text())
    assert lst["kind"] == "List" and [d["kind"] for d in lst["items"]] == ["ConfigMap", "PyTorchJob"]


def test_an_output_path_without_its_folder_is_a_usage_error(config: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Audit 7: `-o /missing/dir/j.yaml` exited 1 (an OSError) where every other launch usage error exits 2."""
    assert main(["launch", "k8s", str(config), "-o", str(tmp_path / "missing" / "j.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["launch", "k8s", str(config), "-o", str(tmp_path)]) == 2  # a folder, not a file name
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("kwargs, needle", [({"name": "Bad_Name"}, "DNS-1123"), ({"nodes": 0}, "--nodes"),
                                            ({"restart_policy": "Sometimes"}, "restart-policy")])
def test_bad_options_are_named(config: Path, kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build_manifests(K8sJob(config=config, **kwargs))
