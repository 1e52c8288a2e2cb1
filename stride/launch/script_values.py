"""Values that go into a generated script, manifest or command line: one line of printable text, quoted.

`stride launch slurm --partition $'gpu\\nrm -rf ~'` used to put `rm -rf ~` on a line of its own in the
sbatch script, where bash ran it; `--out-dir` went unquoted into `#SBATCH --output=`. Every value a
launcher writes now passes `check_value` (no newline, no control character: refused with a ConfigError
naming the option) and is quoted for its reader: `shlex.quote` for bash lines, and for `#SBATCH` lines
too, whose parser (Slurm's `_get_argument`) honours the same single and double quotes; a backslash,
which that parser reads as an escape even inside quotes where bash does not, is refused there.
"""

from __future__ import annotations

import re
import shlex

from stride.config.errors import ConfigError

K8S_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
HOST_PORT = re.compile(r"[A-Za-z0-9._\-\[\]:]+:[0-9]{1,5}")
# The --set every scheduler job's `stride train` gets before the user's: a requeued or restarted job resumes
# from its newest checkpoint (the launchers check the config with them, as the ranks will load it).
RESUME_SETS = ("checkpoint.enabled=true", "checkpoint.resume=auto")


def check_value(value: object, option: str) -> str:
    """`value` as text if it is one line of printable characters; else a ConfigError naming `option`."""
    text = str(value)
    bad = next((c for c in text if not (c.isprintable() or c == " ")), None)
    if bad is not None:
        raise ConfigError(f"{option} = {text!r} holds a control character ({bad!r}): refused (a value must stay "
                          "on its line of the generated script)")
    return text


def check_all(values: list[str], option: str) -> list[str]:
    return [check_value(v, option) for v in values]


def sbatch_directive(value: str, option: str) -> str:
    """A `#SBATCH` option, quoted for sbatch's own parser (which reads a backslash as an escape)."""
    check_value(value, option)
    if "\\" in value:
        raise ConfigError(f"{option} = {value!r}: a backslash in an #SBATCH line is read as an escape by sbatch; "
                          "refused")
    return shlex.quote(value)


def check_pattern(value: str | None, pattern: re.Pattern[str], option: str, what: str) -> None:
    """None, or a value the whole of which matches `pattern` (fullmatch: a trailing newline does not pass)."""
    if value is not None and not pattern.fullmatch(check_value(value, option)):
        raise ConfigError(f"{option} = {value!r} is not {what}")
