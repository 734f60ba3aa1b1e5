"""The stored responses' table (gateway/accounts/stored_responses.py) on a real SQLite database: a conversation
1,000 turns deep is read back in one query, in order and fast; its bounds (turns, bytes) are a 400; a
chain that lost a turn is a 404 that says so; another tenant finds nothing; expired rows are swept.
Each runs written through, written ahead (every row still held in memory and the write-ahead file) and
split (the older half of the chain in the table, the newer half held)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gateway.accounts.storage import open_database
from gateway.accounts.stored_responses import ResponseSettings, ResponseStore, Stored
from gateway.errors import InvalidRequest, NotFound

TURNS = 1000


MODES = pytest.mark.parametrize("mode", ["through", "ahead", "split"])


def store(tmp_path: Path, mode: str = "through", **settings: object) -> ResponseStore:
    engine = open_database(f"sqlite:///{tmp_path / 'tiergate.db'}")
    ahead = tmp_path / "responses-wal" if mode != "through" else None
    # Never flushed on its own here: "ahead" keeps every row held, "split" flushes half way.
    held = ResponseSettings(flush_interval_s=3600, **settings)  # type: ignore[arg-type]
    return ResponseStore(engine, held, ahead)


async def chain(responses: ResponseStore, turns: int, tenant: str = "acme", mode: str = "") -> list[str]:
    ids: list[str] = []
    for i in range(turns):
        if i == turns // 2 and mode == "split":
            await responses.flush()
        ids.append(f"resp_{i:032d}")
        parent = ids[-2] if len(ids) > 1 else None
        await responses.put(tenant, ids[-1], Stored(b"{}", f"[{i}]".encode(), parent))
    return ids


@MODES
def test_a_thousand_turns_are_read_in_one_query_in_order(tmp_path: Path, mode: str) -> None:
    responses = store(tmp_path, mode)

    async def run() -> None:
        ids = await chain(responses, TURNS, mode=mode)
        started = time.perf_counter()
        added = await responses.conversation("acme", ids[-1])
        seconds = time.perf_counter() - started
        assert added == [f"[{i}]".encode() for i in range(TURNS)]
        assert seconds < 0.5, seconds
        with pytest.raises(NotFound):  # another tenant's id is not found
            await responses.conversation("other", ids[-1])
        with pytest.raises(NotFound):
            await responses.get("other", ids[-1])

    asyncio.run(run())


@MODES
def test_the_bounds_are_a_400_and_a_cut_chain_a_404(tmp_path: Path, mode: str) -> None:
    responses = store(tmp_path, mode, max_turns=10, max_conversation_bytes=1000)

    async def run() -> None:
        ids = await chain(responses, 10, mode=mode)
        with pytest.raises(InvalidRequest, match="start a new one"):
            await responses.conversation("acme", ids[-1])  # its 11th turn would be one too many
        assert len(await responses.conversation("acme", ids[-2])) == 9
        await responses.put("acme", "resp_big", Stored(b"{}", b"x" * 2000))
        with pytest.raises(InvalidRequest, match="start a new one"):
            await responses.conversation("acme", "resp_big")
        await responses.delete("acme", ids[3])
        with pytest.raises(NotFound, match="deleted or expired"):
            await responses.conversation("acme", ids[8])
        assert len(await responses.conversation("acme", ids[2])) == 3  # the turns before it are whole

    asyncio.run(run())


@MODES
def test_expired_responses_are_neither_read_nor_kept(tmp_path: Path, mode: str) -> None:
    responses = store(tmp_path, mode, retention_s=0.05)

    async def run() -> None:
        ids = await chain(responses, 3, mode=mode)
        await asyncio.sleep(0.1)
        with pytest.raises(NotFound):
            await responses.get("acme", ids[0])
        assert await responses.sweep() == 3

    asyncio.run(run())
