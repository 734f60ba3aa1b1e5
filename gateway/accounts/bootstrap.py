"""The first run: on a fresh database, create the admin key and a ``default`` tenant's key and write
them to a 0600 file in the data folder (shown once; only their hashes are kept)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

from gateway.accounts.tenants import NewKey, TenantStore

log = logging.getLogger(__name__)

CREDENTIALS_FILE = "initial-credentials.json"


def write_credentials(path: Path, admin: NewKey, tenant: NewKey) -> None:
    """The first run's keys, readable by this user only."""
    body = {
        "admin_key": admin.key,
        "admin_key_id": admin.id,
        "tenant": tenant.tenant,
        "tenant_key": tenant.key,
        "tenant_key_id": tenant.id,
        "note": "Shown once: store these keys elsewhere, then delete this file. "
        "Only their hashes are kept by tiergate.",
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(body, out, indent=2)
    os.chmod(path, 0o600)


async def first_run(store: TenantStore, data_path: Path) -> None:
    """Create the first keys if the database has none; a no-op afterwards."""
    created = await asyncio.to_thread(store.bootstrap)
    if created is None:
        return
    path = data_path / CREDENTIALS_FILE
    await asyncio.to_thread(write_credentials, path, *created)
    log.warning(
        "first run: created the admin key and a key for tenant 'default'; they are in %s "
        "(mode 0600, shown once: move them somewhere safe and delete the file)",
        path,
    )
