"""The authenticator's memories are bounded by ``[auth]`` (issue 43): key ids looked up, and the
addresses whose failed authentications are counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.accounts.storage import open_database
from gateway.accounts.tenants import Authenticator, TenantLimits, TenantStore
from gateway.accounts.tenants._throttle import FailureThrottle
from gateway.errors import AuthenticationFailed
from gateway.settings import load_settings


async def test_key_cache_entries_bounds_the_key_ids_remembered(tmp_path: Path) -> None:
    store = TenantStore(open_database(f"sqlite:///{tmp_path / 'db.sqlite'}"), TenantLimits())
    auth = Authenticator(store, cache_s=60, cache_entries=10)
    for i in range(35):  # made-up keys: each id remembered as unknown, until the bound empties them
        with pytest.raises(AuthenticationFailed):
            await auth.caller({"authorization": f"Bearer tg_{i:012d}_abc"})
        assert len(auth._cache) <= 10 and len(auth._fetched) <= 10


def test_failed_auth_addresses_bounds_the_addresses_remembered() -> None:
    throttle = FailureThrottle(3, 60.0, max_addresses=50)
    for i in range(500):
        throttle.failed(f"10.0.{i >> 8}.{i & 255}")
    assert len(throttle._failures) == 50


def test_the_auth_bounds_are_settings() -> None:
    auth = load_settings(
        environ={"TIERGATE_AUTH__KEY_CACHE_ENTRIES": "7", "TIERGATE_AUTH__FAILED_AUTH_ADDRESSES": "9"}
    ).auth
    assert (auth.key_cache_entries, auth.failed_auth_addresses) == (7, 9)
