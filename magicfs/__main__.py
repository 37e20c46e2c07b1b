"""``python -m magicfs`` is the ``magicfs`` command."""

from .cli import main

raise SystemExit(main())
