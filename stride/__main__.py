"""`python -m stride` (and `torchrun -m stride`) is the `stride` command, ended as the console script ends it."""

from stride.cli.main import entry

entry()
