"""``python -m ovkit``."""

from ovkit.cli import main

raise SystemExit(main())
