"""``python -m gateway`` is the ``tiergate`` command (for an environment whose scripts are not on PATH)."""

from gateway.tools.cli import main

main()
