"""A packed point with dropout gives the same numbers however it is packed (audit 10, F3).

Before: the masks of a chunk were drawn at once from torch's global generator, left wherever the last model
built left it, so a point's masks (and its losses: 1.6383 under --pack 2, 1.6606 under --pack 4 for the same
point) depended on its pack size, its companions and its place in the pack; a resumed sweep packs its unfinished
points anew. Now each model draws from a generator of its own, seeded from its own train.seed.
"""

from __future__ import annotations

import json
from pathlib import Path

from sweep_fixtures import config as run_config

from stride.cli.main import main
from stride.sweep.packed_train import PackedTrainer

COLUMNS = ("final_val_loss", "final_train_loss", "params_sha256")


def _results(out: Path) -> dict[str, dict]:
    """Each point's summary figures and logged losses, by its grid values."""
    got = {}
    for p in (out / "points").glob("*.json"):
        obj = json.loads(p.read_text())
        got[json.dumps(obj["values"])] = {**{k: obj["summary"][k] for k in COLUMNS},
                                          "losses": [h.get("loss") for h in obj["history"]]}
    return got


def test_a_dropout_point_is_the_same_under_pack_2_and_pack_4(config, tmp_path) -> None:
    args = ["sweep", str(config), "--set", "model.dropout=0.3", "--grid", "train.seed=0..3"]
    assert main([*args, "--pack", "2", "--out", str(tmp_path / "p2")]) == 0
    assert main([*args, "--pack", "4", "--out", str(tmp_path / "p4")]) == 0
    two, four = _results(tmp_path / "p2"), _results(tmp_path / "p4")
    assert len(two) == 4 and two == four  # bit for bit (was 1e-2 apart in val loss)
    sizes = {json.loads(p.read_text())["pack"]["size"] for p in (tmp_path / "p2" / "points").glob("*.json")}
    assert sizes == {2}


def test_companions_order_and_chunks_do_not_change_a_dropout_model() -> None:
    """The transformer (dropout in attention and the residual stream): model seed 3 alone of its kind in a pack
    of 2 with seed 1, of 4 in reversed order, and of 4 in chunks of 2."""
    cfgs = {s: run_config("ts_transformer", f"train.seed={s}", "model.dropout=0.3", "train.steps=3",
                          "train.val_every=3") for s in range(4)}

    def trained(seeds: list[int], chunk: int | None = None) -> tuple:
        pt = PackedTrainer([cfgs[s] for s in seeds], chunk=chunk)
        pt.fit()
        pt.close()
        s = pt.records[seeds.index(3)].summary
        return s["final_val_loss"], s["params_sha256"]

    assert trained([1, 3]) == trained([3, 2, 1, 0]) == trained([0, 1, 2, 3], chunk=2)


def test_a_lone_dropout_point_of_a_resumed_sweep_trains_packed_to_the_same_result(config, tmp_path, capsys) -> None:
    """The last unfinished point of a class (a resume) trains as a pack of one: the Trainer would draw other masks
    than the pack it was planned in."""
    out = tmp_path / "s"
    args = ["sweep", str(config), "--set", "model.dropout=0.3", "--grid", "train.seed=0..2", "--pack", "3",
            "--out", str(out)]
    assert main(args) == 0
    before = _results(out)
    path = sorted((out / "points").glob("*.json"))[1]
    path.unlink()
    path.with_suffix(".state.pt").unlink()
    capsys.readouterr()
    assert main(args) == 0
    assert "1 point(s) of `mlp` in 1 pack(s) of up to 1 (one point, packed: its dropout masks as in any pack)" \
        in capsys.readouterr().err
    obj = json.loads(path.read_text())
    assert obj["mode"] == "packed" and obj["pack"]["size"] == 1
    assert obj["one_by_one_method"] == "measured: the point trained alone (a pack of one)"
    assert _results(out) == before
