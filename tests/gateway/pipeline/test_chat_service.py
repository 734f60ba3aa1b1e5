"""ChatService with in-process fake tiers: tenant isolation of the cache, breakers and degradation
as the service API (the admin UI and the tenants work will call it this way)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

import cache
import router
from gateway.errors import ModalityUnavailable
from gateway.ops.metrics import Metrics
from gateway.pipeline.answers.exact import AnswerCache, CacheStatus
from gateway.pipeline.chat import ChatService, RequestContext
from gateway.wire.chat import parse_chat_request
from tests.pipeline import chat_service, complete, streamed
from tiers import (
    Capabilities,
    Event,
    Finished,
    Generation,
    Health,
    Modality,
    Started,
    TextDelta,
    TierState,
    TierUnavailable,
    ToolCallDelta,
    Usage,
)

RULE = router.AutoRule()


class FakeTier:
    """Answers "<name> answer #<n>"; ``fail_images`` makes image requests fail like a 5xx, ``down`` every
    request before its first event, ``fail_after`` (pieces) a request midway."""

    def __init__(self, name: str, modalities: set[Modality]) -> None:
        self.name = name
        self.calls: list[Generation] = []
        self.fail_images = False
        self.down = False
        self.fail_after: int | None = None
        self._caps = Capabilities(frozenset(modalities), 4096, f"{name}-model")

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def state(self) -> TierState:
        return TierState(self.name, Health.READY)

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def _check(self, gen: Generation) -> None:
        self.calls.append(gen)
        has_image = any(
            isinstance(m.get("content"), list) and any(p["type"] == "image_url" for p in m["content"])
            for m in gen.messages
        )
        if self.fail_images and has_image:
            raise TierUnavailable(self.name, "replica answered 500: vision encoder crashed")
        if self.down:
            raise TierUnavailable(self.name, "connection refused")

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        self._check(gen)
        yield Started(model=self._caps.model)
        for n, piece in enumerate((f"{self.name} ", "answer ", f"#{len(self.calls)}")):
            if n == self.fail_after:
                raise TierUnavailable(self.name, "the connection dropped")
            yield TextDelta(piece)
        yield Finished("stop", Usage(3, 3))


def service(tmp_path: Path, **kw: object) -> tuple[ChatService, FakeTier, FakeTier]:
    edge = FakeTier("edge", {Modality.TEXT})
    cloud = FakeTier("cloud", {Modality.TEXT, Modality.IMAGE})
    config = cache.CacheConfig()
    answers = AnswerCache(config, cache.DiskStore(tmp_path / "c", 1 << 24), RULE, Metrics())
    breakers = router.BreakerBoard(router.BreakerConfig(consecutive_failures=2, cooldown_s=60))
    chat = chat_service(
        {"edge": edge, "cloud": cloud}, RULE, Metrics(), answers=answers, breakers=breakers, **kw
    )  # type: ignore[arg-type]
    return chat, edge, cloud


def request(content: object = "Say hello.", **kw: object):
    import json

    body = {
        "model": "tiergate-auto",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8,
        **kw,
    }
    return parse_chat_request(json.dumps(body).encode())


IMAGE = [
    {"type": "text", "text": "What is this?"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
]


async def test_a_tenant_never_reads_another_tenants_answer(tmp_path: Path) -> None:
    chat, edge, _ = service(tmp_path)
    acme, globex = RequestContext(tenant="acme"), RequestContext(tenant="globex")
    routed, first = await complete(chat, request(temperature=0), "r1", acme)
    assert routed.cache is CacheStatus.MISS
    routed, again = await complete(chat, request(temperature=0), "r2", acme)
    assert routed.cache is CacheStatus.HIT
    assert again.choices[0].message.content == first.choices[0].message.content == "edge answer #1"
    routed, other = await complete(chat, request(temperature=0), "r3", globex)
    assert routed.cache is CacheStatus.MISS
    assert other.choices[0].message.content == "edge answer #2"
    assert len(edge.calls) == 2
    routed, _ = await complete(
        chat, request(temperature=0), "r4", RequestContext(tenant="acme", use_cache=False)
    )
    assert routed.cache is CacheStatus.BYPASS
    assert len(edge.calls) == 3
    await chat.aclose()


async def test_stream_replay_keeps_the_pieces(tmp_path: Path) -> None:
    chat, _, _ = service(tmp_path)
    first = await streamed(chat, request(temperature=0, stream=True), "r1", RequestContext())
    original = [e async for e in first.events]
    again = await streamed(chat, request(temperature=0, stream=True), "r2", RequestContext())
    assert again.routed.cache is CacheStatus.HIT
    replayed = [e.replace(b"r2", b"r1") async for e in again.events]

    def strip(events: list[bytes]) -> list[bytes]:  # drop the creation time, which may differ
        return [e.split(b'"created":')[0] + e.split(b'"model":')[1] for e in events if b"created" in e]

    assert strip(replayed) == strip(original)
    await chat.aclose()


async def test_open_image_breaker_degrades_image_requests_and_spares_text(tmp_path: Path) -> None:
    chat, edge, cloud = service(tmp_path)
    cloud.fail_images = True
    for _ in range(2):
        with pytest.raises(Exception, match="vision encoder crashed"):
            await complete(chat, request(IMAGE), "r", RequestContext())
    assert {(b["tier"], b["modality"], b["state"]) for b in chat.tiers.breaker_states()} == {
        ("cloud", "image", "open")
    }
    calls = len(cloud.calls)
    routed, body = await complete(chat, request(IMAGE), "r", RequestContext())
    assert routed.degraded == ("image",)
    assert body.tiergate.degraded == ["image"]  # type: ignore[union-attr]
    sent = (edge if routed.tier == "edge" else cloud).calls[-1].messages
    assert sent[0]["role"] == "system" and "image" in sent[0]["content"]
    assert all(isinstance(m["content"], str) for m in sent)
    assert len(cloud.calls) == calls or routed.tier == "cloud"
    routed, _ = await complete(chat, request("Hi", max_tokens=400), "r", RequestContext())
    assert routed.tier == "cloud" and routed.degraded == ()


async def test_fail_instead_of_degrade_is_a_503(tmp_path: Path) -> None:
    chat, _, cloud = service(tmp_path, fail_instead_of_degrade=True)
    cloud.fail_images = True
    for _ in range(2):
        with pytest.raises(Exception, match="vision"):
            await complete(chat, request(IMAGE), "r", RequestContext())
    with pytest.raises(ModalityUnavailable) as caught:
        await complete(chat, request(IMAGE), "r", RequestContext())
    assert caught.value.status == 503
    assert "image path is failing" in caught.value.message
    # and a tenant policy can override the setting per request
    routed, _ = await complete(chat, request(IMAGE), "r", RequestContext(fail_instead_of_degrade=False))
    assert routed.degraded == ("image",)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tier_failing_before_its_first_event_fails_over_to_the_next(
    tmp_path: Path, stream: bool
) -> None:
    chat, edge, cloud = service(tmp_path)
    edge.down = True
    if stream:
        start = await streamed(chat, request(stream=True), "r", RequestContext())
        routed, sent = start.routed, b"".join([e async for e in start.events])
        assert b"cloud answer #1" not in sent and b'"cloud "' in sent and sent.endswith(b"data: [DONE]\n\n")
    else:
        routed, body = await complete(chat, request(), "r", RequestContext())
        assert body.choices[0].message.content == "cloud answer #1"
    assert routed.tier == "cloud" and "edge: connection refused, failed over" in routed.reason
    assert len(edge.calls) == len(cloud.calls) == 1


async def test_a_stream_failing_after_its_first_event_ends_with_an_error_and_no_failover(
    tmp_path: Path,
) -> None:
    chat, edge, cloud = service(tmp_path)
    edge.fail_after = 1
    start = await streamed(chat, request(stream=True), "r", RequestContext())
    assert start.routed.tier == "edge"
    sent = [e async for e in start.events]
    assert b'"edge "' in sent[0]  # the role and the first piece
    assert b'"error"' in sent[-1] and b"the connection dropped" in sent[-1]
    assert not cloud.calls


async def test_a_json_answer_failing_midway_is_answered_by_the_next_tier(tmp_path: Path) -> None:
    chat, edge, _ = service(tmp_path)
    edge.fail_after = 1  # the client has seen nothing of it
    routed, body = await complete(chat, request(), "r", RequestContext())
    assert routed.tier == "cloud" and body.choices[0].message.content == "cloud answer #1"


class ToolTier(FakeTier):
    """Answers every request with one call to its first tool, in pieces: id and name, then arguments."""

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        self._check(gen)
        yield Started(model=self._caps.model)
        yield ToolCallDelta(0, f"call_{len(self.calls)}", gen.tools[0]["function"]["name"])
        yield ToolCallDelta(0, arguments='{"city": "Oslo"}')
        yield Finished("tool_calls", Usage(3, 5))


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALLED = {"role": "assistant", "content": None}
CALLED["tool_calls"] = [
    {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
]


async def test_the_cache_key_covers_what_shapes_the_answer_and_replays_get_fresh_call_ids(
    tmp_path: Path,
) -> None:
    chat, _, _ = service(tmp_path)
    tier = ToolTier("edge", {Modality.TEXT})
    chat.tiers.tiers["edge"] = tier
    base = {"temperature": 0, "tools": [WEATHER], "tool_choice": "required"}
    routed, first = await complete(chat, request(**base), "r1")
    assert routed.cache is CacheStatus.MISS and first.choices[0].finish_reason == "tool_calls"
    routed, again = await complete(chat, request(**base), "r2")
    assert routed.cache is CacheStatus.HIT
    (call,), (replayed,) = first.choices[0].message.tool_calls, again.choices[0].message.tool_calls  # type: ignore[misc]
    assert replayed.function == call.function and replayed.id != call.id and replayed.id.startswith("call_")
    other = WEATHER | {"function": {"name": "get_time", "parameters": {"type": "object"}}}
    variants = [
        {**base, "tools": [other]},
        {**base, "tool_choice": "auto"},
        {**base, "response_format": {"type": "json_object"}},
        {**base, "logprobs": True},
        {**base, "n": 2},
        {**base, "parallel_tool_calls": False},
    ]
    for i, variant in enumerate(variants):
        routed, _ = await complete(chat, request(**variant), f"v{i}")
        assert routed.cache is CacheStatus.MISS, variant
    history = [
        {"role": "user", "content": "Weather?"},
        CALLED,
        {"role": "tool", "tool_call_id": "call_a", "content": "sun"},
    ]
    body = {"model": "tiergate-auto", "messages": history, "max_tokens": 8, **base}
    routed, _ = await complete(chat, parse_chat_request(json.dumps(body).encode()), "h1")
    assert routed.cache is CacheStatus.MISS
    history[2] = {"role": "tool", "tool_call_id": "call_a", "content": "rain"}  # another tool result
    body["messages"] = history
    routed, _ = await complete(chat, parse_chat_request(json.dumps(body).encode()), "h2")
    assert routed.cache is CacheStatus.MISS
    await chat.aclose()
