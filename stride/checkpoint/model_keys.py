"""Whether a checkpoint's model entries are the built model's, compared before DCP loads anything.

DCP's load reads what the target state dict asks for. An entry the model has and the checkpoint lacks fails the
read (DCP's "Missing key in checkpoint state_dict"); an entry the checkpoint holds and the model lacks is dropped
without a word. tcn's `model.n_layers` counted n + 2 blocks before 2026-12-07 and n blocks since: a run saved with
4 blocks resumed with 2, `resume_changes: []`, and its loss jumped from 1.18 to 1.54 (review of 4285274). The
names compared are the checkpoint's `.metadata` keys (what DCP saved: every checkpoint has them) and the template's.
Under pipeline parallelism a rank's model holds its stage only, so the model's names are the union of the ranks'.
"""

from __future__ import annotations

from typing import Any

SHOWN = 4  # entry names a message shows (of each kind)


def template_names(state: dict[str, Any], saved: set[str]) -> tuple[list[str], list[str]]:
    """(this rank's model entry names, those of them the checkpoint lacks): `state` is the load template (its
    "model" section keyed by fully qualified name), `saved` the checkpoint's `.metadata` keys."""
    names = sorted(state.get("model") or {})
    return names, [n for n in names if f"model.{n}" not in saved]


def keys_problem(saved: set[str], ranks: list[tuple[list[str], list[str]] | None]) -> tuple[str, list[str]]:
    """('', []) if the checkpoint (its `.metadata` keys `saved`) holds exactly the model's entries; otherwise what
    differs, in words, naming a few entries, and the checkpoint's model entry names. `ranks`: each rank's
    `template_names` (the same outcome on every rank, which all load or all refuse)."""
    have = {n for r in ranks if r is not None for n in r[0]}
    lacking = sorted({n for r in ranks if r is not None for n in r[1]})
    held = sorted(k[len("model."):] for k in saved if k.startswith("model."))
    extra = [n for n in held if n not in have]
    # optimizer state is keyed "optim.state.<parameter name>.<state name>" (nested and flat forms alike)
    orphans = sorted(k for k in saved if k.startswith("optim.state.") and not _of(k[len("optim.state."):], have))
    parts = []
    if extra:
        parts.append(f"it holds {len(extra)} model entries this model lacks ({_few(extra)})")
    if orphans:
        parts.append(f"{len(orphans)} optimizer entries of parameters this model lacks ({_few(orphans, '')})")
    if lacking:
        parts.append(f"this model has {len(lacking)} entries it lacks ({_few(lacking)})")
    if not parts:
        return "", held
    return ("the checkpoint was saved from a model of another shape: " + "; ".join(parts)
            + f" (the checkpoint holds {len(held)} model entries, this model {len(have)})"), held


def _of(rest: str, have: set[str]) -> bool:
    """Whether an optimizer state key (after "optim.state.") belongs to one of the parameters `have` names."""
    dots = [i for i, c in enumerate(rest) if c == "."]
    return any(rest[:i] in have for i in dots)


def _few(names: list[str], prefix: str = "model.") -> str:
    shown = ", ".join(prefix + n for n in names[:SHOWN])
    return shown + (f", ... {len(names) - SHOWN} more" if len(names) > SHOWN else "")
