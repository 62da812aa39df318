"""``python -m jaxtune``: the same command line as the ``jaxtune`` script."""

from ._cli import main

raise SystemExit(main())
