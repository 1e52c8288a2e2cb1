"""Session-wide test set-up.

Triton kernels run under Triton's CPU interpreter when no CUDA GPU is present. `triton.jit` reads
TRITON_INTERPRET when it decorates a function, so this must be set before ANY test module imports a
kernel module, whichever directory pytest collects first: hence here, in the root conftest.
"""

import os
import random
import secrets
import signal
import tempfile

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# stride's per-host dtype probe (stride.metrics.dtype_speed) keeps its figures here, not in ~/.cache
os.environ.setdefault("STRIDE_CACHE_DIR", tempfile.mkdtemp(prefix="stride-test-cache-"))
# A suite started as a background job of a non-interactive shell (`nohup make test &`, a CI runner's step) inherits
# SIGINT ignored, and so would every process it starts: the Ctrl-C tests would then watch a child ignore their
# SIGINT and fail. A Python handler here (not SIG_IGN) is reset to the default at exec, so children see Ctrl-C as a
# terminal delivers it (a CPython child then raises KeyboardInterrupt), whatever the suite inherited.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


SEEDS_ENV = "STRIDE_TEST_SEEDS"


def _seeds(spec: str) -> list[int]:
    """`STRIDE_TEST_SEEDS`: "1266434485" (replay one), "0-399" (a range, both ends), or a comma list of either."""
    out: list[int] = []
    for part in spec.replace(" ", "").split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise pytest.UsageError(f"{SEEDS_ENV}={spec!r}: expected seeds like '7', '0-99' or '3,9,100-120'")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """With STRIDE_TEST_SEEDS set, every test that takes the `seed` fixture runs once per seed listed: the replay of
    a seed a failure printed, or a sweep over many (tests/kernels' error bounds were checked over seeds 0-399 so)."""
    spec = os.environ.get(SEEDS_ENV)
    if not spec or "seed" not in metafunc.fixturenames:
        return
    def names(arg: object) -> list[str]:
        return [n.strip() for n in arg.split(",")] if isinstance(arg, str) else list(arg)  # type: ignore[call-overload]

    direct = any("seed" in names(m.args[0]) for m in metafunc.definition.iter_markers("parametrize") if m.args)
    if not direct:  # a test that parametrizes `seed` itself keeps its own values
        metafunc.parametrize("seed", _seeds(spec), indirect=True)


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A fresh seed each run; tests put it in their assert messages so a failure can be replayed
    (`STRIDE_TEST_SEEDS=<seed> pytest ...`)."""
    s = getattr(request, "param", None)
    if s is None:
        s = random.SystemRandom().randrange(2**31)
    torch.manual_seed(s)
    return s


@pytest.fixture(autouse=True)
def _keep_tf32_settings():
    """Put torch's TF32 switches back after each test. A Trainer on CUDA turns TF32 on for its process
    (stride.train.device.configure_process), and a float64-referenced kernel test that ran after it in the
    same worker then read TF32's 3e-4 errors (the H200 run of 2026-12-04)."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


@pytest.fixture
def fifo(tmp_path) -> "os.PathLike[str]":
    """A named pipe in tmp_path, for inputs that must be refused without being opened (nothing ever writes to it:
    a command that opened it for reading would block)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    p = tmp_path / "input.toml"
    os.mkfifo(p)
    return p


@pytest.fixture(scope="session")
def ray_auth_token() -> str:
    """One Ray auth token for the whole test process: Ray reads RAY_AUTH_TOKEN once per process, so a second
    local cluster started under a new token fails to reach its own GCS (InvalidAuthToken). Given in the
    environment, the token also keeps Ray from writing ~/.ray/auth_token. It is stride's own per-process token,
    so a cluster that stride.launch.ray_train starts in this process later authenticates too."""
    try:
        from stride.launch.ray_train import _PROCESS_TOKEN
    except ImportError:  # pragma: no cover - stride itself not importable: the Ray tests skip anyway
        return secrets.token_hex(16)
    return _PROCESS_TOKEN


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the group marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `pytest -n 2 --dist loadgroup` (`make test`): what runs beside what.

    The suite is one core's work at a time except the multi-process tests, so `make test` runs two
    workers. Every test marked `dist` (several processes on these 2 cores, some with collective
    timeouts) goes to one group, run one after another on one worker as in a serial run; each other
    module is a group of its own, so its module-scoped fixtures are built once. The dist group is put
    first so that its long serial run starts at once and the other worker fills in beside it.
    """
    # xdist's workers see `loadgroup` (their own `dist` is set to "no"); the controller collects no items
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        group = "dist" if item.get_closest_marker("dist") else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("dist") is None)  # stable: dist first
