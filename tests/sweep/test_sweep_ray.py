"""`stride sweep --backend ray` on a real local Ray cluster (2 CPUs): packs run as Ray tasks, and the table
equals the one the same sweep writes in-process (the same packs on the same machine)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sweep_fixtures import mlp_toml

from stride.cli.main import main

CONFIG = mlp_toml(12, 6)
COLUMNS = ["point", "train.seed", "optim.lr", "status", "steps", "final_train_loss", "final_val_loss"]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory, ray_auth_token: str) -> Iterator[None]:
    """As tests/launch's: 2 CPUs, no dashboard or usage stats, a 100 MB object store, an auth token in the
    environment (so Ray writes no ~/.ray/auth_token), session files under a short temp path."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")
    import ray

    token_file = Path.home() / ".ray" / "auth_token"
    had_token = token_file.exists()
    temp = Path(tempfile.mkdtemp(prefix="stride-ray-"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("RAY_AUTH_TOKEN", ray_auth_token)
        mp.delenv("RAY_ADDRESS", raising=False)
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, _temp_dir=str(temp))
        try:
            yield
        finally:
            ray.shutdown()
            subprocess.run(["rm", "-rf", str(temp)], check=False)
    assert had_token or not token_file.exists(), "Ray wrote ~/.ray/auth_token"


@pytest.mark.slow
def test_sweep_on_ray_equals_the_local_sweep(ray_cluster, tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    grid = ["--grid", "train.seed=0..3", "--grid", "optim.lr=1e-3,2e-3", "--pack", "4"]
    assert main(["sweep", str(cfg), *grid, "--backend", "ray", "--out", str(tmp_path / "ray")]) == 0
    assert main(["sweep", str(cfg), *grid, "--backend", "local", "--out", str(tmp_path / "local")]) == 0
    on_ray = pq.read_table(tmp_path / "ray" / "table.parquet").to_pylist()
    local = pq.read_table(tmp_path / "local" / "table.parquet").to_pylist()
    assert [r["pack_size"] for r in on_ray] == [4] * 8
    assert [{k: r[k] for k in COLUMNS} for r in on_ray] == [{k: r[k] for k in COLUMNS} for r in local]
    packs = (tmp_path / "ray" / "packs.jsonl").read_text()
    assert packs.count('"backend": "ray"') == 2 and '"error": null' in packs
    assert sys.modules.get("ray") is not None and sys.modules["ray"].is_initialized()  # the cluster was reused
