"""``python -m magicfs`` is the ``magicfs`` command."""

from .integrations.cli import main

raise SystemExit(main())
