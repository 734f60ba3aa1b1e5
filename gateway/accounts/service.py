"""Everything about who calls and what it costs, opened and closed with the app.

Holds the database, the tenant store, the authenticator, the rate limiter, the price
book, the ledger and the tenants' routing policies; on a fresh database it creates the
admin key and a ``default`` tenant's key and writes them to a 0600 file in the data folder.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

from sqlalchemy import Engine

from gateway.accounts.ledger import Ledger, PriceBook
from gateway.accounts.policies import PolicyBook, PolicyStore
from gateway.accounts.storage import open_database
from gateway.accounts.tenants import Authenticator, NewKey, RateLimiter, TenantStore, make_limiter
from gateway.media import MediaPipeline
from gateway.ops.activity import Activity
from gateway.ops.metrics import Metrics
from gateway.pipeline.chat import AUTO_MODEL, ChatService
from gateway.pipeline.metering import MeteredChat
from gateway.settings import Settings

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


class Accounts:
    engine: Engine
    store: TenantStore
    auth: Authenticator
    limiter: RateLimiter
    prices: PriceBook
    ledger: Ledger | None
    metered: MeteredChat
    policies: PolicyBook

    def __init__(
        self,
        settings: Settings,
        chat: ChatService,
        media: MediaPipeline | None = None,
        activity: Activity | None = None,
    ) -> None:
        self._settings = settings
        self._chat = chat
        self._media = media
        self._activity = activity

    async def start(self) -> None:
        settings = self._settings
        self.engine = await asyncio.to_thread(open_database, settings.database_url)
        self.store = TenantStore(self.engine, settings.limits.default)
        created = await asyncio.to_thread(self.store.bootstrap)
        if created is not None:
            path = settings.data_path / CREDENTIALS_FILE
            await asyncio.to_thread(write_credentials, path, *created)
            log.warning(
                "first run: created the admin key and a key for tenant 'default'; they are in %s "
                "(mode 0600, shown once: move them somewhere safe and delete the file)",
                path,
            )
        if settings.auth.open_mode:
            log.warning("auth.open_mode is on: no API keys are checked (local development only)")
        self.auth = Authenticator(
            self.store, cache_s=settings.auth.key_cache_s, open_mode=settings.auth.open_mode
        )
        await self.auth.start()
        self.limiter = make_limiter(settings.limits.redis_url)
        tier_names = [n for n in self._chat.model_names if n != AUTO_MODEL]
        policy_store = PolicyStore(self.engine, settings.policies.default, tier_names)
        self.policies = PolicyBook(policy_store, refresh_s=settings.policies.refresh_s)
        await self.policies.start()
        pricing = settings.pricing
        self.prices = await asyncio.to_thread(
            PriceBook.sync, self.engine, pricing.prices, pricing.counterfactual_tier
        )
        self.ledger = None
        if settings.ledger.enabled:
            self.ledger = Ledger(
                self.engine,
                settings.data_path / "ledger",
                flush_interval_s=settings.ledger.flush_interval_s,
                writer_process=settings.ledger.writer_process,
                sync=settings.ledger.sync,
            )
            await self.ledger.start()
        self.metered = MeteredChat(
            self._chat, self.limiter, self.ledger, self.prices, self._media, self._activity
        )

    def scrape(self, metrics: Metrics) -> None:
        """A /metrics hook: the ledger's backlog."""
        ledger = getattr(self, "ledger", None)
        if ledger is not None:
            metrics.ledger_backlog.set(ledger.backlog)

    async def aclose(self) -> None:
        if getattr(self, "policies", None) is not None:
            await self.policies.aclose()
        if getattr(self, "ledger", None) is not None:
            assert self.ledger is not None
            await self.ledger.aclose()
        if getattr(self, "limiter", None) is not None:
            await self.limiter.aclose()
        if getattr(self, "engine", None) is not None:
            self.engine.dispose()
