# `python -m vitlab ...`, also what `torchrun -m vitlab` runs.
from vitlab.cli import main

raise SystemExit(main())
