"""Install tiergate from an offline bundle as a hardened systemd service; upgrade and roll back.

Standard library only, and its modules import one another relatively and nothing else of tiergate:
the bundle ships this package beside a small ``install.py`` that its ``install.sh`` runs with the
machine's own ``python3`` before anything of tiergate is installed.

What an install writes, under ``--root`` (default ``/``)::

    opt/tiergate/releases/<version>-<bundle id>/   venv/ (pip --no-index from the bundle's wheels),
                                                   models/ (the cloud model, when bundled), bundle.json
    opt/tiergate/current -> releases/...           the release the service runs
    opt/tiergate/previous -> releases/...          what `--rollback` returns to
    etc/tiergate/tiergate.toml                     written once; an upgrade keeps it (new defaults:
                                                   tiergate.toml.dist beside it)
    var/lib/tiergate/                              data (ledger, cache, keys); never touched by upgrades
    etc/systemd/system/tiergate.service            the unit, enabled for multi-user.target
    usr/lib/sysusers.d/tiergate.conf               the system user `tiergate`
    usr/local/bin/tiergate -> opt/tiergate/current/venv/bin/tiergate

Nothing is fetched from a network: every wheel comes from the bundle, whose checksums are verified
before anything is written.

Its parts::

    layout        paths under the root, the unit and sysusers texts, InstallError
    bundle_check  open a bundle (a folder or an archive) and verify it against its manifest and
                  this machine
    steps         the Installer: install, upgrade, roll back, dry run
    command       the command line (``main``)
"""

from .bundle_check import Bundle, opened, platform_tag, python_tag, sha256_file, verify
from .command import main
from .layout import (
    BIN_LINK,
    CONFIG,
    ETC,
    INFO,
    KEEP_RELEASES,
    MANIFEST,
    PREFIX,
    STATE,
    SYSUSERS,
    SYSUSERS_TEXT,
    UNIT,
    UNIT_TEXT,
    USER,
    WANTS,
    InstallError,
    Say,
)
from .steps import Installer, venv_files

__all__ = [
    "BIN_LINK",
    "CONFIG",
    "ETC",
    "INFO",
    "KEEP_RELEASES",
    "MANIFEST",
    "PREFIX",
    "STATE",
    "SYSUSERS",
    "SYSUSERS_TEXT",
    "UNIT",
    "UNIT_TEXT",
    "USER",
    "WANTS",
    "Bundle",
    "InstallError",
    "Installer",
    "Say",
    "main",
    "opened",
    "platform_tag",
    "python_tag",
    "sha256_file",
    "venv_files",
    "verify",
]
