"""One rank of a world-size sweep: pin to this rank's core, then run the `stride` command unchanged.

`python -m stride.bench.rank_entry train CONFIG ...` is `python -m stride train CONFIG ...` with one
call before it: the pinning has to happen inside each rank (torchrun starts every rank with the same
command line) and before torch creates its thread pools, so the threads inherit the core.
"""

from __future__ import annotations

import sys

from stride.bench.pinning import pin_from_env

if __name__ == "__main__":
    import os

    core = pin_from_env()
    if core is not None:  # evidence in torchrun.log that the plan was applied
        print(f"stride.bench: local rank {os.environ.get('LOCAL_RANK', '0')} pinned to core {core}", file=sys.stderr)
    from stride.cli.main import main

    raise SystemExit(main(sys.argv[1:]))
