"""``install.py``'s command line (also ``tiergate install``): install or upgrade from a bundle, or
roll back. Standard library only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .bundle_check import opened, verify
from .layout import InstallError
from .steps import Installer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="install.py", description="Install tiergate from an offline bundle."
    )
    parser.add_argument("--from", dest="bundle", type=Path, help="bundle folder or archive")
    parser.add_argument("--root", type=Path, default=Path("/"), help="install under this root (default /)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print every file it would write; write nothing"
    )
    parser.add_argument("--rollback", action="store_true", help="make the previous release current again")
    parser.add_argument("--no-start", action="store_true", help="do not (re)start the service")
    args = parser.parse_args(argv)
    installer = Installer(args.root.resolve(), dry_run=args.dry_run, start=not args.no_start)
    try:
        if args.rollback:
            installer.rollback()
        elif args.bundle is None:
            parser.error("--from BUNDLE is required (or --rollback)")
        else:
            with opened(args.bundle) as folder:
                installer.install(verify(folder))
    except InstallError as exc:
        print(f"tiergate install: {exc}", file=sys.stderr)
        return 1
    return 0
