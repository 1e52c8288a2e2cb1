"""Issue 19, case 5: a value given to a launcher never leaves its line of the generated script.

`stride launch slurm --partition $'gpu\\n<command>'` used to put <command> on a line of its own in the
sbatch script; `--out-dir` went unquoted into `#SBATCH --output=`. Every launcher now refuses a value with a
newline or another control character (exit 2, one line naming the option) and quotes the rest. The
scripts are run here by bash with stub `srun`/`scontrol` binaries (nothing is submitted), and their
`#SBATCH` lines read back with the rules of sbatch's own parser.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from fault_helpers import GEN, one_line_error, stride_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stride.config import ConfigError
from stride.launch.k8s import K8sJob, build_manifests
from stride.launch.slurm import SlurmJob, render_sbatch
from stride.launch.torchrun import torchrun_command
from stride.launch.yaml_writer import dump_yaml

TINY = "[train]\nsteps = 2\nbatch_size = 8\n[data]\nn_steps = 512\nseq_len = 8\nhorizons = [1]\n"
CONTROL = ["\n", "\r", "\x00", "\x1b", "\t", "\x0b", "\u2028", "\x85"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(TINY)
    return p


def sbatch_arguments(line: str) -> list[str]:
    """An `#SBATCH` line's arguments as sbatch reads them: whitespace separates, single or double quotes group,
    a backslash escapes the next character (inside quotes too), an unquoted '#' ends the line."""
    args, cur, quote, escape, started = [], [], "", False, False
    for c in line:
        if escape:
            cur.append(c)
            escape = False
        elif c == "\\":
            escape = started = True
        elif quote:
            if c == quote:
                quote = ""
            else:
                cur.append(c)
        elif c in "'\"":
            quote, started = c, True
        elif c == "#":
            break
        elif c.isspace():
            if started:
                args.append("".join(cur))
                cur, started = [], False
        else:
            cur.append(c)
            started = True
    if started:
        args.append("".join(cur))
    return args


def run_script(script: str, tmp: Path) -> Path:
    """Run the sbatch script with bash and stub srun/scontrol/scancel; returns the file srun's argv went to."""
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    argv_file = tmp / "srun-argv"
    (stubs / "srun").write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > {argv_file}\n')
    (stubs / "scontrol").write_text("#!/bin/sh\necho node1\n")
    (stubs / "scancel").write_text("#!/bin/sh\nexit 0\n")
    for f in stubs.iterdir():
        f.chmod(0o755)
    path = tmp / "job.sbatch"
    path.write_text(script)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "SLURM_NNODES": "1", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n1",
           "HOME": str(tmp)}
    r = subprocess.run(["bash", str(path)], cwd=tmp, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return argv_file


def _slurm(config: Path, tmp: Path, **kw) -> str:
    return render_sbatch(SlurmJob(config=config, out_dir=kw.pop("out_dir", tmp / "runs"), **kw))


# -- fixed cases: refused with one line ------------------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [
    ("--partition", "gpu\ntouch CANARY"), ("--partition", "gpu\rtouch CANARY"),
    ("--sbatch", "--account=a\ntouch CANARY"), ("--out-dir", "runs\ntouch CANARY"),
    ("--time", "04:00:00\ntouch CANARY"), ("--job-name", "x\ntouch CANARY"),
    ("--set", "train.name=a\ntouch CANARY"), ("--sbatch", "--comment=a\\b"),
])
def test_slurm_refuses_a_control_character_in_any_option(config: Path, tmp_path: Path, flag: str, value: str,
                                                          monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a CANARY, if anything ran, lands here
    res = stride_main("launch", "slurm", str(config), "--dry-run", f"{flag}={value}" if flag == "--sbatch" else flag,
                      *([] if flag == "--sbatch" else [value]))
    one_line_error(res, flag, codes=(2,))
    assert not (tmp_path / "CANARY").exists() and "touch CANARY" not in res.out


@pytest.mark.parametrize("char", CONTROL)
def test_every_control_character_is_refused_in_a_slurm_value(config: Path, tmp_path: Path, char: str) -> None:
    for kw in ({"partition": f"gpu{char}x"}, {"extra_sbatch": [f"--comment=a{char}b"]},
               {"out_dir": tmp_path / f"runs{char}x"}, {"overrides": [f"train.name=a{char}b"]}):
        with pytest.raises(ConfigError, match="control character"):
            _slurm(config, tmp_path, **kw)


@pytest.mark.parametrize("flag,value", [
    ("--name", "job\n"), ("--namespace", "default\nx"), ("--image", "img\n- name: evil"), ("--cpu", "8\n"),
    ("--memory", "1Gi\x00"), ("--pvc", "claim\n"), ("--set", "train.name=a\nb"), ("--image", "two words"),
])
def test_k8s_refuses_control_characters_and_bad_fields(config: Path, flag: str, value: str) -> None:
    one_line_error(stride_main("launch", "k8s", str(config), flag, value), flag, codes=(2,))


def test_torchrun_and_ray_refuse_control_characters(config: Path) -> None:
    one_line_error(stride_main("train", str(config), "--nnodes", "2", "--nproc", "1", "--rdzv-endpoint",
                               "h:29500\ntouch X"), "--rdzv-endpoint", codes=(2,))
    with pytest.raises(ConfigError, match="control character"):
        torchrun_command([str(config), "--set", "a=b\nc"], nproc=2)
    one_line_error(stride_main("launch", "ray", str(config), "--workers", "1", "--address", "auto\nx"), "--address",
                   codes=(2,))


# -- legal but awkward values: quoted, nothing runs, read back intact ----------------------------------------

AWKWARD = ["runs dir", "a'b", 'a"b', "$(touch CANARY)", "`touch CANARY`", "x;touch CANARY", "a#b", "~user",
           "* ?", "ünï cødé", "-rf", "${HOME}"]


def _check_slurm(config: Path, tmp: Path, out_dir: str, partition: str | None, extra: str, override: str) -> None:
    base = tmp / "base"
    base.mkdir(exist_ok=True)
    script = _slurm(config, base, out_dir=base / out_dir, partition=partition, extra_sbatch=[extra],
                    overrides=[override])
    reference = _slurm(config, base, out_dir=base / "plain", partition=partition and "p", extra_sbatch=["--x=y"],
                       overrides=["a=b"])
    assert len(script.splitlines()) == len(reference.splitlines())  # no value made a line of its own
    directives = [sbatch_arguments(line[len("#SBATCH"):]) for line in script.splitlines() if line.startswith("#SBATCH")]
    assert all(len(d) == 1 for d in directives), directives
    opts = [d[0] for d in directives]
    assert f"--output={(base / out_dir).resolve()}/slurm-%x-%j.out" in opts and extra in opts
    argv = run_script(script, base).read_bytes().split(b"\0")[:-1]
    args = [a.decode() for a in argv]
    assert args[args.index("--out") + 1] == f"{(base / out_dir).resolve()}/stride-77"
    assert override in args
    assert not (base / "CANARY").exists() and not (tmp / "CANARY").exists()


@pytest.mark.parametrize("value", AWKWARD)
def test_slurm_quotes_awkward_values_and_runs_nothing(config: Path, tmp_path: Path, value: str, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a CANARY, if anything ran, lands here
    _check_slurm(config, tmp_path, value.replace("/", "_"), None, f"--comment={value}", f"train.name={value}")


printable = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=24)


@settings(**GEN, max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=printable)
def test_slurm_any_text_is_refused_or_stays_on_its_line(config: Path, tmp_path: Path, value: str,
                                                        monkeypatch) -> None:
    """Property: whatever the text, either a ConfigError or a script where it is one quoted argument."""
    monkeypatch.chdir(tmp_path)  # a CANARY, if anything ran, lands here
    try:
        _check_slurm(config, tmp_path, "o" + value.replace("/", "_").replace("\x00", ""), None,
                     f"--comment={value}", f"train.name={value}")
    except ConfigError as exc:
        assert "control character" in str(exc) or "backslash" in str(exc)
        assert any(not (c.isprintable() or c == " ") for c in value) or "\\" in value


@settings(**GEN, max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=printable)
def test_k8s_any_override_is_refused_or_read_back_exactly(config: Path, value: str) -> None:
    try:
        docs = build_manifests(K8sJob(config=config, overrides=[f"train.name={value}"]))
    except ConfigError as exc:
        assert "control character" in str(exc)
        return
    loaded = list(yaml.safe_load_all(dump_yaml(docs)))
    args = loaded[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == f"train.name={value}"


def test_k8s_configmap_carries_any_config_text_exactly(tmp_path: Path) -> None:
    """Astral characters used to go out as JSON surrogate pairs, which YAML reads as two lone surrogates."""
    cfg = tmp_path / "c.toml"
    text = TINY + "# 📈 momentum \u2028 line sep \x85 nel \t tab \"quotes\" \\ backslash\n"
    cfg.write_text(text)
    out = dump_yaml(build_manifests(K8sJob(config=cfg)))
    assert out.isascii()
    assert list(yaml.safe_load_all(out))[0]["data"]["config.toml"] == text
