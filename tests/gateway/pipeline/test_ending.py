"""The one ending (gateway/pipeline/ending.py) with in-process fake tiers: what each way a stream ends
does to the result cache and the breakers, and how a cut answer's tokens are counted.  The ledger's
side, against a real gateway: tests/integration/test_endings.py."""

from __future__ import annotations

from pathlib import Path

from gateway.pipeline.answers.exact import CacheStatus
from gateway.pipeline.chat import RequestContext
from gateway.pipeline.ending import Tally
from tests.gateway.pipeline.test_chat_service import request, service
from tests.pipeline import streamed
from tiers import Finished, Logprobs, Modality, Started, TextDelta, ToolCallDelta, Usage


def test_a_cut_answer_is_counted_by_its_pieces_and_a_finished_one_by_the_tier() -> None:
    tally = Tally()
    assert tally.usage(prompt_estimate=12) == Usage(0, 0)  # nothing began: nothing to bill
    for event in (Started(), TextDelta("a"), Logprobs([]), ToolCallDelta(0, arguments="{")):
        tally.add(event)
    assert tally.usage(prompt_estimate=12) == Usage(12, 2)  # the tier read the prompt; two pieces
    tally.add(Finished("stop", Usage(9, 5)))
    assert tally.usage(prompt_estimate=12) == Usage(9, 5)  # the tier's own count wins


async def test_a_stream_its_client_closes_is_not_cached_and_frees_its_breaker(tmp_path: Path) -> None:
    chat, edge, _ = service(tmp_path)
    ask = request(temperature=0, stream=True)
    closed = await streamed(chat, ask, "r1", RequestContext())
    await anext(closed.events)
    await closed.events.aclose()
    again = await streamed(chat, ask, "r2", RequestContext())
    assert again.routed.cache is CacheStatus.MISS  # a partial answer is never kept
    [_ async for _ in again.events]
    third = await streamed(chat, ask, "r3", RequestContext())
    assert third.routed.cache is CacheStatus.HIT  # the complete one is
    [_ async for _ in third.events]
    assert chat.tiers.breakers.last_failure("edge", Modality.TEXT) == ""
    assert len(edge.calls) == 2
    await chat.aclose()


async def test_a_tier_failing_mid_stream_counts_against_its_breaker_and_is_not_cached(tmp_path: Path) -> None:
    chat, edge, _ = service(tmp_path)
    edge.fail_after = 2
    ask = request(temperature=0, stream=True)
    cut = await streamed(chat, ask, "r1", RequestContext())
    frames = [f async for f in cut.events]
    assert b'"error"' in frames[-1]  # the client is told in the stream, which ends there
    assert "dropped" in chat.tiers.breakers.last_failure("edge", Modality.TEXT)
    edge.fail_after = None
    again = await streamed(chat, ask, "r2", RequestContext())
    assert again.routed.cache is CacheStatus.MISS
    await chat.aclose()
