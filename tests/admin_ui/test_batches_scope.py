"""The admin batches page shows each operator the batches of the tenants they see: an admin and a
viewer every tenant's, a tenant admin (a person administering several tenants too) only theirs."""

from __future__ import annotations

from pathlib import Path

from admin_ui._batches import batches_state
from gateway.accounts.batches import BatchStore, FileStore
from gateway.accounts.storage import open_database
from gateway.accounts.tenants import Caller
from tests.gateway.accounts.test_batch_store import batch_of


def test_each_operator_sees_the_batches_of_the_tenants_they_see(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store = BatchStore(
        engine, FileStore(engine, tmp_path, 1 << 20, 100), owner="gw", lease_s=60, max_line=1 << 16
    )
    made = {tenant: batch_of(store, tenant, lines=2) for tenant in ("blue", "green", "red")}

    def seen(caller: Caller) -> dict[str, str]:
        return {b["id"]: b["tenant"] for b in batches_state(store, caller)["batches"]}

    everything = {batch: tenant for tenant, batch in made.items()}
    assert seen(Caller("k-admin", "admin", None)) == everything
    assert seen(Caller("person:ann", "viewer", None, person="ann")) == everything
    lead = Caller("person:bo", "tenant-admin", None, person="bo", tenants=("blue", "red"))
    assert seen(lead) == {made["blue"]: "blue", made["red"]: "red"}
    engine.dispose()
