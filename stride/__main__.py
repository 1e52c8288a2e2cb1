"""`python -m stride` (and `torchrun -m stride`) is the `stride` command."""

from stride.cli.main import main

raise SystemExit(main())
