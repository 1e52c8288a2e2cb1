import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sweep_fixtures import copy_of, finished_sweep, mlp_toml  # noqa: E402 (after the path it is found on)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """A 4-step MLP config, one per test module (a module may define its own `config`, which wins)."""
    path = tmp_path_factory.mktemp("cfg") / "tiny.toml"
    path.write_text(mlp_toml(4, 4))
    return path


@pytest.fixture(scope="module")
def finished(config, tmp_path_factory) -> Path:
    """The 2 x 2 GRID sweep of `config` (sweep_fixtures), finished; a module may define its own, which wins."""
    return finished_sweep(config, tmp_path_factory)


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    """A copy of `finished` the test may edit."""
    return copy_of(finished, tmp_path)
