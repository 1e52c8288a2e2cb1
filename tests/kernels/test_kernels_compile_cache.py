"""torch.compile's CPU code cache is kept apart per instruction set (stride.kernels.compile_cache).

The behaviour test compiles the same op in two processes that share one cache folder, the second under another
ATen CPU capability (`default`: no vector code, which every x86 host can run), and compares each with eager. Without
the separation torch 2.13 loads the first process's kernel in the second (wrong numbers or a crash).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stride.kernels.compile_cache import ENV, isa_key, isolate_inductor_cache

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, torch
from stride.kernels.ops import get_ops
from stride.kernels.reference import rms_norm
torch.manual_seed(0)
x, w = torch.randn(7, 33), 1 + 0.1 * torch.randn(33)
err = (get_ops("compile").rms_norm(x, w) - rms_norm(x, w)).abs().max().item()
print(torch.backends.cpu.get_cpu_capability(), os.environ["TORCHINDUCTOR_CACHE_DIR"], err)
"""


@pytest.mark.slow
def test_two_instruction_sets_sharing_a_cache_folder_each_compile_their_own(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", ENV, "TRITON_INTERPRET")}
    env[ENV] = str(tmp_path / "shared")
    outs = []
    for capability in (None, "default"):
        run_env = dict(env, **({"ATEN_CPU_CAPABILITY": capability} if capability else {}))
        p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=REPO, env=run_env,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        outs.append(p.stdout.split())
    (cap1, dir1, err1), (cap2, dir2, err2) = outs
    assert cap2 == "DEFAULT" and cap1 != cap2
    assert float(err1) < 1e-5 and float(err2) < 1e-5  # each process's kernels are its own: eager's numbers
    assert Path(dir1).parent == Path(dir2).parent == tmp_path / "shared" and dir1 != dir2


def test_the_cache_moves_under_the_folder_set_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "c"))
    path = isolate_inductor_cache()
    assert path == str(tmp_path / "c" / isa_key()) and os.environ[ENV] == path
    assert isolate_inductor_cache() == path  # idempotent: a child process inherits it as is
    monkeypatch.setenv(ENV, str(tmp_path / "c" / "cpu-avx2-0123456789"))  # set under another instruction set
    assert isolate_inductor_cache() == path


def test_without_a_folder_set_torchs_default_gets_the_subfolder(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.delenv(ENV, raising=False)
    assert isolate_inductor_cache() == os.path.join(os.path.abspath(default_cache_dir()), isa_key())


def test_the_key_names_the_capability_aten_runs() -> None:
    import torch

    key = isa_key()
    assert key.startswith(f"cpu-{torch.backends.cpu.get_cpu_capability().lower()}-") and len(key.split("-")[-1]) == 10


def test_every_module_that_compiles_moves_the_cache_first() -> None:
    """A compile site that does not call isolate_inductor_cache reads kernels cached under another instruction set
    (the pipeline's per-block compile was one: its run diverged at step 1 under ATEN_CPU_CAPABILITY=avx2)."""
    import re

    sites = []
    for path in sorted((REPO / "stride").rglob("*.py")):
        text = path.read_text()
        if re.search(r"torch\.compile\(|\.compile\(\)|functools\.partial\(torch\.compile", text) and \
                path.name != "compile_cache.py":
            sites.append(path.relative_to(REPO).as_posix())
            assert "isolate_inductor_cache()" in text, f"{path}: compiles without isolate_inductor_cache()"
    assert {"stride/train/apply.py", "stride/optim/factory.py", "stride/kernels/ops.py",
            "stride/parallel/pipeline.py"} <= set(sites)
