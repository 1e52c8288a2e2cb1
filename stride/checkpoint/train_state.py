"""What a checkpoint holds, gathered from a trainer and put back into one (through `TrainerView`).

Tensors (model, optimizer, RNG states) go through DCP, so each rank writes its own shards and a
load may use another world size or layout (`get_state_dict`/`set_state_dict` handle FSDP and DDP).
The small non-tensor parts (step, LR schedule, loss scaler, data position, fault-guard history)
travel as one JSON string per section: DCP stores a string as bytes, and JSON needs no unpickling.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from stride.checkpoint.rng import capture_rng, restore_rng, rng_problem
from stride.parallel.ranks import rank_and_world
from stride.train.callbacks import TrainerView


def _options(flat: bool) -> StateDictOptions:
    """Under pipeline parallelism the optimizer state is saved flat, keyed by parameter name (param_groups
    too, as torchtitan does): each rank's optimizer holds other parameters, and the nested
    `param_groups[0].params` list every rank saves would collide under one key. Flat keys also load
    into another layout (pp=2 -> pp=1). Other runs keep the nested form; a load follows the file."""
    return StateDictOptions(flatten_optimizer_state_dict=flat)


IMPL_KEYS = ("fused", "foreach", "capturable", "differentiable")  # torch optimizers' implementation switches


def to_json(obj: Any) -> str:
    def default(o: Any) -> Any:
        if isinstance(o, torch.Tensor) and o.numel() == 1:
            return o.item()
        if hasattr(o, "item"):
            return o.item()
        if isinstance(o, tuple):
            return list(o)
        raise TypeError(f"checkpoint state holds a {type(o).__name__}, which is not JSON: {o!r}")

    return json.dumps(obj, default=default)


def capture(trainer: TrainerView, guard_state: dict[str, Any]) -> dict[str, Any]:
    """The state dict handed to dcp.save / async_save (tensors are live references: DCP stages them)."""
    rank, _ = rank_and_world()
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer, options=_options(trainer.pipelined))
    extras = {**trainer.state_dict(), "guard": guard_state}  # step, skipped_steps, scheduler, scaler
    return {
        "model": model_sd,
        "optim": optim_sd,
        "train": to_json(extras),
        f"rank{rank}": {"rng": capture_rng(), "data": to_json(trainer.data_position())},
    }


def load_template(trainer: TrainerView, saved_keys: set[str]) -> dict[str, Any]:
    """A state dict of the right structure for dcp.load; this rank's section only if it was saved."""
    rank, _ = rank_and_world()
    flat = "optim.param_groups.0.params" not in saved_keys  # nested form: a list of names per group
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer, options=_options(flat))
    adapt = getattr(trainer.optimizer, "checkpoint_template", None)
    if adapt is not None:  # an optimizer that reads older state formats (AdamW8bit): DCP loads what was saved
        optim_sd = adapt(optim_sd, {k[len("optim."):] for k in saved_keys if k.startswith("optim.")})
    out: dict[str, Any] = {"model": model_sd, "optim": optim_sd, "train": ""}
    if any(k.startswith(f"rank{rank}.") for k in saved_keys):
        rng = capture_rng()
        rng = {k: v for k, v in rng.items() if f"rank{rank}.rng.{k}" in saved_keys}
        out[f"rank{rank}"] = {"rng": rng, "data": ""}
    return out


def apply(trainer: TrainerView, loaded: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Put a loaded state into the trainer; returns (guard state, notes on what could not be restored)."""
    rank, _ = rank_and_world()
    notes: list[str] = []
    # how this layout runs the optimizer step, not what it trained: a checkpoint's param_groups carry the saving
    # run's choice (a 1-process run's fused AdamW), which under TP (DTensor and plain parameters in one group, for
    # which the for-loop is chosen) failed at the first step with "got mixed torch.Tensor and DTensor" (audit 6)
    impl = [{k: g[k] for k in IMPL_KEYS if k in g} for g in trainer.optimizer.param_groups]
    set_state_dict(trainer.model, trainer.optimizer, model_state_dict=loaded["model"],
                   optim_state_dict=loaded["optim"], options=_options("param_groups" not in loaded["optim"]))
    state = trainer.optimizer.state
    for group, mine in zip(trainer.optimizer.param_groups, impl, strict=True):
        saved_on_device = bool(group.get("fused") or group.get("capturable"))
        group.update(mine)
        on_device = bool(mine.get("fused") or mine.get("capturable"))
        if saved_on_device == on_device:
            continue
        # torch's load_state_dict placed each `step` counter by the saved flags (fused/capturable: on the
        # parameter's device); under this layout's flags a for-loop step would read a device counter with a sync
        # per parameter and step: it goes where a fresh run of this layout keeps it (its dtype unchanged)
        for p in group["params"]:
            step = state.get(p, {}).get("step")
            if isinstance(step, torch.Tensor):
                state[p]["step"] = step.to(device=p.device if on_device else "cpu")
    extras = json.loads(loaded["train"])
    mine = trainer.state_dict()
    extras = {**extras, **{k: _as_template(extras[k], mine[k]) for k in ("scheduler", "scaler") if k in extras}}
    trainer.load_state_dict(extras)
    section = loaded.get(f"rank{rank}")
    if section is None:
        notes.append(f"the checkpoint has no RNG or data state for rank {rank} (saved with fewer ranks): "
                     "this rank keeps its seeded RNG and replays its data from the start")
        trainer.resume_data({"kind": "replay", "batches": trainer.step})
    else:
        trainer.resume_data(json.loads(section["data"]))
        notes += restore_rng(section["rng"])
    return extras.get("guard") or {}, notes


def _as_template(saved: Any, template: Any) -> Any:
    """`saved` (checked by `_shape_problem`) with the numbers the template holds as one-element tensors made such
    tensors again, of the template's dtype and device: a scheduler whose base_lrs are tensors multiplies in their
    precision, so a float there would move the learning rate in its last bit after a resume."""
    if isinstance(template, torch.Tensor) and template.numel() == 1 and isinstance(saved, int | float):
        return torch.tensor(saved, dtype=template.dtype, device=template.device).reshape(template.shape)
    if isinstance(template, dict) and isinstance(saved, dict):
        return {k: _as_template(v, template[k]) if k in template else v for k, v in saved.items()}
    if isinstance(template, list) and isinstance(saved, list) and len(saved) == len(template):
        return [_as_template(a, b) for a, b in zip(saved, template, strict=True)]
    return saved


def _shape_problem(saved: Any, template: Any, where: str) -> str | None:
    """`saved` has the shape of `template` (what this trainer writes): the same keys (none unknown), list
    lengths, kinds of number; None only where the template has None. JSON cannot carry code, but a scheduler
    loads its dict into its attributes, so a foreign key or type would break the run steps later."""
    if isinstance(template, dict):
        if not isinstance(saved, dict):
            return f"{where} is not a table"
        for k, v in saved.items():
            if k not in template:
                return f"{where} has an unknown entry {k!r}"
            if why := _shape_problem(v, template[k], f"{where}.{k}"):
                return why
        return None
    if isinstance(template, list):
        if not isinstance(saved, list) or len(saved) != len(template):
            return f"{where} is not a list of {len(template)}"
        return next((w for i, (a, b) in enumerate(zip(saved, template, strict=True))
                     if (w := _shape_problem(a, b, f"{where}[{i}]"))), None)
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,), type(None): (type(None),)}
    # a one-element tensor (a compiled optimizer's tensor learning rate: the scheduler's base_lrs) is written as its
    # number (to_json) and read back as a tensor of the live one's dtype (`_as_template`)
    is_scalar_tensor = isinstance(template, torch.Tensor) and template.numel() == 1
    ok = (int, float) if is_scalar_tensor and template.is_floating_point() else kinds.get(type(template), ())
    if type(saved) not in ok:
        return f"{where} is {saved!r}, not a {type(template).__name__}"
    return None


def problem(trainer: TrainerView, loaded: dict[str, Any], step: int) -> str | None:
    """What is wrong with the JSON sections of a checkpoint loaded for `step` (None: nothing), before
    any of it is applied: step and counters as saved at that step, a schedule and scaler of this
    trainer's shape, a guard history of numbers, a data position stride writes."""
    rank, _ = rank_and_world()
    try:
        extras = json.loads(loaded["train"])
        position = json.loads(loaded[f"rank{rank}"]["data"]) if f"rank{rank}" in loaded else {"kind": "replay"}
    except (TypeError, ValueError, RecursionError) as exc:
        return f"its training state is not JSON ({exc})"
    if not isinstance(extras, dict) or not isinstance(position, dict):
        return "its training state is not a JSON object"
    if type(extras.get("step")) is not int or extras["step"] != step:
        return f"its training state is at step {extras.get('step')!r}, not the folder's step {step}"
    if type(extras.get("skipped_steps")) is not int or not 0 <= extras["skipped_steps"] <= step:
        return f"skipped_steps {extras.get('skipped_steps')!r} is not a count of steps up to {step}"
    mine = trainer.state_dict()
    for key in ("scheduler", "scaler"):
        saved = extras.get(key)
        if key == "scaler" and isinstance(saved, dict) and not (saved and mine[key]):
            continue  # fp32 has no loss scaler ({}): between fp32 and fp16 nothing of it is loaded
        if why := _shape_problem(saved, mine[key], key):
            return why
    guard = extras.get("guard") or {}
    numbers = (int, float)
    if not isinstance(guard, dict) or not all(type(v) in numbers for v in guard.get("window", [])) \
            or not all(type(guard.get(k, 0)) is int for k in ("nonfinite_steps", "spikes")):
        return "its step-guard history is not the numbers stride writes"
    kind, state = position.get("kind"), position.get("state")
    counters = ("epoch", "position", "seed")
    if kind not in ("state_dict", "replay") or (kind == "state_dict" and not (
            isinstance(state, dict) and all(type(state.get(k)) is int and state[k] >= 0 for k in counters)
            and all(type(state[k]) is int and state[k] >= 0 for k in ("n_windows", "batch_size") if k in state))) \
            or (kind == "replay" and not (type(position.get("batches", 0)) is int and position.get("batches", 0) >= 0)):
        return f"rank {rank}'s data position {json.dumps(position)[:120]} is not one stride writes"
    if why := _position_problem(trainer, position, step):
        return f"rank {rank}'s data position {why}"
    if f"rank{rank}" in loaded and (why := rng_problem(loaded[f"rank{rank}"].get("rng"))):
        return f"rank {rank}'s {why}"  # checked before anything is applied: NumPy takes any position (audit 14, H1)
    return None


def _position_problem(trainer: TrainerView, position: dict[str, Any], step: int) -> str | None:
    """A data position (of the shape stride writes) beyond what `step` steps over this run's data can reach (None:
    within it). A step takes one batch (grad_accum splits it), and a stateful loader's position counts batches
    within an epoch of ceil(windows / batch) batches: a position of 10**15 resumed without a word (audit 14, L10),
    and a replay of that many batches would never end. The epoch may run one ahead of the steps (the first batch
    of the next step is taken early)."""
    if position["kind"] == "replay":
        batches = position.get("batches", step)
        return None if batches <= step else f"replays {batches} batches, more than the {step} steps taken"
    state = position["state"]
    if state["epoch"] > step + 1:
        return f"is at epoch {state['epoch']}, more than {step} steps of one batch can reach"
    n, batch = data_shape(trainer.data_position())
    for key, live in (("n_windows", n), ("batch_size", batch)):  # WindowBatches.load_state_dict raised on these
        if key in state and live is not None and state[key] != live:  # after every check: a traceback (audit 16, M1)
            return f"has {key} {state[key]}, this run's data {live}"
    if n is not None and batch is not None and batch > 0:
        per_epoch = -(-n // batch)
        if state["position"] > per_epoch:
            return (f"is batch {state['position']} of an epoch, past its end (this run's data: {n} windows, "
                    f"{per_epoch} batches of {batch} an epoch)")
    return None


def data_shape(position: dict[str, Any]) -> tuple[int | None, int | None]:
    """(windows, global batch size) of a stateful loader's position (`data_position()`); None where it has none."""
    state = position.get("state") if isinstance(position, dict) and position.get("kind") == "state_dict" else None
    if not isinstance(state, dict):
        return None, None
    n, batch = state.get("n_windows"), state.get("batch_size")
    return (n if type(n) is int else None), (batch if type(batch) is int else None)


def position_of(loaded: dict[str, Any]) -> tuple[Any, ...] | None:
    """This rank's saved data position as (kind, epoch, position, seed, n_windows, batch_size), or (kind, batches)
    for a replay; None without a section or where it is not the shape stride writes (`problem` says why)."""
    rank, _ = rank_and_world()
    try:
        position = json.loads(loaded[f"rank{rank}"]["data"])
    except (KeyError, TypeError, ValueError, RecursionError):
        return None
    if not isinstance(position, dict):
        return None
    if position.get("kind") == "replay":
        return ("replay", position.get("batches"))
    state = position.get("state")
    if position.get("kind") != "state_dict" or not isinstance(state, dict):
        return None
    return ("state_dict", *(state.get(k) for k in ("epoch", "position", "seed", "n_windows", "batch_size")))


def _describe(p: tuple[Any, ...]) -> str:
    return f"replays {p[1]} batches" if p[0] == "replay" else f"epoch {p[1]}, batch {p[2]}, seed {p[3]}"


def data_changed(trainer: TrainerView, positions: list[tuple[Any, ...] | None], meta: dict[str, Any],
                 folder: str) -> str | None:
    """Why the run cannot continue from this checkpoint on its data (None: it can). The data's windows and batch
    size are meta.json's (`data`, written since audit 16) where it has them, else every rank's position agreeing
    on one other count: the store was re-ingested or edited since, so every checkpoint has the old count, and a
    fallback cannot help (it was a ValueError traceback on every rank, audit 16, M1). A count that only some
    ranks' positions have is a damaged checkpoint, skipped (`problem`)."""
    n, batch = data_shape(trainer.data_position())
    if n is None or batch is None:
        return None
    saved = meta.get("data")
    if isinstance(saved, dict):
        then = (saved.get("n_windows"), saved.get("batch_size"))
    else:
        seen = {p[4:6] for p in positions if p is not None and p[0] == "state_dict"}
        if len(seen) != 1 or any(p is None or p[0] != "state_dict" for p in positions):
            return None
        then = seen.pop()
    if then == (n, batch):
        return None
    cfg = getattr(trainer, "cfg", None)
    store = (f" (the store {Path(cfg.data.store).absolute()})"
             if cfg is not None and cfg.data.source == "store" and cfg.data.store else "")
    return (f"checkpoint {folder} was taken on data of {then[0]} windows in batches of {then[1]}; this run's data"
            f"{store} has {n} windows in batches of {batch}: the data changed since (a store re-ingested or edited?), "
            "and a run cannot continue on other data; restore the data, or use another --out to start over")


def store_identity(data: Any) -> dict[str, Any] | None:
    """The store a `data.source = "store"` run reads: its path and the sha256 of each of its files, as its manifest
    (written at ingestion) records them; None for another source, or a manifest without them (the store's own
    open refuses such a one). Read from the manifest alone: no byte of the data is hashed here.

    The config names the store's folder, not its content, and the window count (meta.json's `data`) only sees a
    re-ingestion that changed the store's length: a store replaced by other data of the same shape (a re-ingest
    with corrected prices, `--overwrite`) resumed without a word and trained on other data than the checkpoint's
    steps had (outside audit of checkpoints under faults, 2026-12-07)."""
    if getattr(data, "source", None) != "store" or not getattr(data, "store", ""):
        return None
    path = Path(data.store)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    sums = {name: info["sha256"] for name, info in (files.items() if isinstance(files, dict) else ())
            if isinstance(info, dict) and isinstance(info.get("sha256"), str)}
    return {"path": str(path.absolute()), "sha256": dict(sorted(sums.items()))} if sums else None


def store_changed(now: dict[str, Any] | None, meta: dict[str, Any], folder: str) -> str | None:
    """Why the store this run reads (`now`, store_identity's) holds other data than the one the checkpoint was taken
    on (meta.json's `data_store`), in words; None where they match, or where either is not known (another source,
    a checkpoint of a stride before this check)."""
    saved = meta.get("data_store")
    if now is None or not isinstance(saved, dict) or not isinstance(saved.get("sha256"), dict):
        return None
    then_sums, now_sums = saved["sha256"], now["sha256"]
    differ = sorted(k for k in set(then_sums) | set(now_sums) if then_sums.get(k) != now_sums.get(k))
    if not differ:
        return None
    where = (f"the store {now['path']}" if saved.get("path") == now["path"]
             else f"the store {saved.get('path')} (this run reads {now['path']})")
    files = ", ".join(f"{k} sha256 {str(then_sums.get(k))[:12]}... then, {str(now_sums.get(k))[:12]}... now"
                      for k in differ)
    return (f"checkpoint {folder} was taken on other data than {where} holds ({files}): the store was re-ingested or "
            "replaced since, and the run would continue on other data than its steps so far trained on; restore that "
            "store, use another --out to start over, or set checkpoint.force_resume = true to continue on this data")


def ranks_disagree(trainer: TrainerView, positions: list[tuple[Any, ...] | None], step: int,
                   meta: dict[str, Any]) -> str | None:
    """Why the ranks' data positions cannot be one run's (None: they can). stride's own loader (its state names the
    windows and the global batch) holds the same global position on every rank under DDP/FSDP/TP/PP: a rank at
    another batch or seed trained on other data with exit 0 (audit 16, M5). The seed is compared between ranks, not
    with this run's config: a resume that force_resume let change `data.seed` continues the checkpoint's stream
    (the loader restores the saved seed). A caller's stateful source may hold per-rank positions and is not
    compared; a replay must replay exactly the steps taken."""
    del trainer, meta  # the checks need the ranks' positions only
    sections = [(r, p) for r, p in enumerate(positions) if p is not None]
    for r, p in sections:
        if p[0] == "replay" and p[1] != step:
            return f"rank {r}'s data position replays {p[1]} batches, not the {step} steps taken"
    ours = [(r, p) for r, p in sections if p[0] == "state_dict" and p[4] is not None and p[5] is not None]
    for r, p in ours[1:]:
        r0, p0 = ours[0]
        if p[:4] != p0[:4]:
            return f"rank {r}'s data position ({_describe(p)}) differs from rank {r0}'s ({_describe(p0)})"
    return None
