"""A checkpoint folder the ranks do not share (audit 16, H1): node-local disk, or copies that differ.

Only rank 0 looked at the files: with `--out` on each node's own disk every save "committed" rank 0's files
(and a manifest listing rank 1's, which rank 0 never had), the run ended with exit 0, and no checkpoint could
ever be loaded; where the nodes' copies differed, rank 1 loaded bytes nobody checked. Two gloo processes
stand for two nodes, each with its own folder at "the same path" (ckpt_view_worker.py): the start refuses,
a save refuses on every rank naming rank 1's files, and at resume every rank checks its own shards so all
skip the same checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_checkpoint_distributed_faults import HERE, _finish, _launch

from stride.checkpoint import verify

SHARED = "checkpoint.dir must be a folder every node shares"


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """One 2-rank launch: the probe, save and resume phases (the tests below read what each rank saw)."""
    base = tmp_path_factory.mktemp("views")
    out = base / "out"
    out.mkdir()
    _finish(_launch(HERE / "ckpt_view_worker.py", [str(base), str(out)]))
    return base, [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.dist
def test_a_start_in_a_folder_the_ranks_do_not_share_is_refused_on_every_rank(views) -> None:
    base, seen = views
    assert seen[0]["probe"] == seen[1]["probe"].replace("node1", "node0")  # every rank refuses, alike (its path)
    msg = seen[0]["probe"]
    assert msg is not None and msg.startswith(f"checkpoint folder {base / 'node0' / 'probe'} is not the same folder "
                                              "on every rank: rank 1 does not see the file rank 0 wrote there "
                                              "(.tmp-stride-"), msg
    assert msg.endswith(f"{SHARED} (a shared filesystem, not node-local disk such as /tmp)")
    assert not (base / "node0" / "probe").exists()  # the probe is gone, and the folder the refused start made


@pytest.mark.dist
def test_a_save_whose_rank_1_files_rank_0_does_not_see_fails_on_every_rank(views) -> None:
    base, seen = views
    assert seen[0]["save"] == seen[1]["save"].replace("node1", "node0")
    msg = seen[0]["save"]
    root = base / "node0" / "save"
    assert msg is not None and msg.startswith(f"checkpoint save at step 1 into {root} failed: rank 1's files "
                                              f"(__1_0.distcp, __1_1.distcp) are not in rank 0's view of {root}: "), msg
    assert SHARED in msg and "no earlier checkpoint" in msg
    assert not (root / "step_00000001").exists() and seen[0]["save_left"] == []  # nothing committed
    assert seen[1]["save_left"] == []  # rank 1 removed its own files from its own copy too


@pytest.mark.dist
def test_at_resume_every_rank_checks_its_own_shards_and_all_skip_together(views) -> None:
    base, seen = views
    assert seen[0]["resume"] == seen[1]["resume"]
    assert seen[0]["resume"]["step"] == 1
    [skip] = seen[0]["resume"]["skipped"]
    assert skip.startswith("step_00000002: in rank 1's view of the folder, __1_") and \
        "does not match its xxh3_128 checksum (corrupted, or another copy)" in skip and SHARED in skip, skip
    assert seen[0]["loaded_shared"] == seen[1]["loaded_shared"] == 1.0  # both loaded step 1
    assert verify(base / "shared" / "step_00000002").ok  # rank 0's own copy is intact: only rank 1 could tell
