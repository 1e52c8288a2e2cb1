"""results.json kept current during a sweep, and a stopped sweep resumed from it.

After every finished variant the whole results.json is rewritten atomically (temporary file, fsync,
rename: `RunDir.write_json`), so a sweep stopped at any moment (Ctrl-C, SIGTERM, SIGKILL, a crash)
leaves a valid file with every variant finished so far, marked `partial` until the last one lands.

Rerunning the same command with the same `--out` resumes: a planned variant whose entry is already
there with the same config hash (and workload version) is taken as measured and not run again. What
would mix incomparable numbers into one file is refused with the reason, never merged silently: a
variant measured with a different config, entries this sweep does not plan, another suite, or
another machine or software (host, CPU, GPUs, torch, stride, git commit).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from stride.bench.results import ResultsError, load_results, make_results
from stride.config.errors import ConfigError
from stride.metrics.run_dir import RunDir

# Fingerprint keys that must match for measurements to share one file.
SAME_MACHINE_KEYS = ("hostname", "cpu_model", "cpu_count", "gpus", "git_commit")
SAME_PACKAGES = ("torch", "stride")


class ResumeError(ConfigError):
    """The existing results.json cannot be continued by this sweep; the message says why and what to do."""


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def config_diff(old: dict[str, Any], new: dict[str, Any], limit: int = 3) -> str:
    """'train.steps: 12 -> 20, ...' for the dotted keys whose values differ (at most `limit` named)."""
    a, b = _flat(old), _flat(new)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    shown = ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "") if keys else "no config key"


class ResultsJournal:
    """The sweep's results.json: `planned` variant names in order (a repeated name counts once); `add` one finished
    entry at a time."""

    def __init__(self, out: Path, suite: str, environment: dict[str, Any], planned: list[str],
                 sections: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None) -> None:
        self.run_dir = RunDir(out)
        self.path = out / "results.json"
        self.suite = suite
        self.environment = environment
        # each name once: a name planned twice (a repeated --workloads) wrote its entry twice, a results.json that
        # `stride report` and `stride compare` refuse ("listed twice")
        self.planned = list(dict.fromkeys(planned))
        self.sections = sections or (lambda entries: {})
        self.entries: dict[str, dict[str, Any]] = {}
        self._previous = self._load_previous()

    def _load_previous(self) -> dict[str, dict[str, Any]]:
        if not self.path.exists():
            return {}
        where = f"{self.path}"
        hint = "use a new --out, or remove that file to measure again"
        try:
            old = load_results(self.path)
        except ResultsError as exc:
            raise ResumeError(f"{exc}; {hint}") from exc
        if old.get("suite") != self.suite:
            raise ResumeError(f"{where} holds a {old.get('suite')!r} run, this is {self.suite!r}; {hint}")
        env = old.get("environment", {})
        for key in SAME_MACHINE_KEYS:
            if env.get(key) != self.environment.get(key):
                raise ResumeError(f"{where} was measured with {key} {env.get(key)!r}, this run has "
                                  f"{self.environment.get(key)!r}: figures from both would not compare; {hint}")
        for pkg in SAME_PACKAGES:
            was, now = env.get("packages", {}).get(pkg), self.environment.get("packages", {}).get(pkg)
            if was != now:
                raise ResumeError(f"{where} was measured with {pkg} {was}, this run has {now}; {hint}")
        stray = [w["name"] for w in old["workloads"] if w["name"] not in self.planned]
        if stray:
            raise ResumeError(f"{where} holds {', '.join(stray)}, which this sweep does not plan "
                              f"(it plans {', '.join(self.planned)}); {hint}")
        return {w["name"]: w for w in old["workloads"]}

    def finished(self, name: str, config_hash: str, version: int, config: dict[str, Any]) -> dict[str, Any] | None:
        """The stored entry of `name` when it was measured with this config, else None (run it).

        A stored entry measured with another config or workload version is refused: keeping it would
        put two configurations under one name, dropping it would silently discard a measurement."""
        old = self._previous.get(name)
        if old is None:
            return None
        if old.get("config_hash") != config_hash or old.get("version") != version:
            what = (f"workload version {old.get('version')} -> {version}" if old.get("version") != version
                    else config_diff(old.get("config") or {}, config))
            raise ResumeError(f"{self.path}: {name} was measured with another config ({what}); use a new --out "
                              "to measure this config, or rerun with the original settings to resume")
        self.entries[name] = old
        return old

    def add(self, entry: dict[str, Any]) -> None:
        """Record a finished variant and rewrite results.json (atomically) with everything finished so far."""
        self.entries[entry["name"]] = entry
        self.write()

    def results(self) -> dict[str, Any]:
        ordered = [self.entries[n] for n in self.planned if n in self.entries]
        res = make_results(self.suite, self.environment, ordered)
        res.update(self.sections(ordered))
        pending = [n for n in self.planned if n not in self.entries]
        if pending:
            res["partial"] = {"done": len(ordered), "planned": len(self.planned), "pending": pending}
        return res

    def write(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        res = {**self.results(), **(extra or {})}
        self.run_dir.write_json("results.json", res)
        return res
