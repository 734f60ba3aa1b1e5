"""The Responses API's event stream from a tier's events (gateway/api/responses/): text, then tool
calls, each item opened, filled and closed in order; a tier failing mid-stream ends it with
``response.failed``; a stored response is kept before ``response.completed`` is sent. Every event is
checked against OpenAI's OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from gateway.accounts.storage import open_database
from gateway.accounts.stored_responses import ResponseSettings, ResponseStore
from gateway.api.responses.controllers import Turn, _stream
from gateway.pipeline.answer import Answer, Routed
from tests.openai_schema import validate
from tiers import (
    Event,
    Finished,
    Logprobs,
    Started,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
)


def answer(events: list[Event], fail: bool = False) -> Answer:
    async def gen() -> AsyncGenerator[Event, None]:
        for event in events:
            yield event
        if fail:
            raise RuntimeError("the engine died")

    return Answer(Routed("edge", "test"), "m", gen(), "resp")


def run(
    tmp_path: Path, body: dict[str, Any], events: list[Event], fail: bool = False
) -> list[dict[str, Any]]:
    store = ResponseStore(open_database(f"sqlite:///{tmp_path / 'db'}"), ResponseSettings())
    turn = Turn(store)

    async def go() -> list[bytes]:
        await turn.parse(json.dumps({"model": "edge", "stream": True, **body}).encode(), "acme")
        return [frame async for frame in _stream(turn, answer(events, fail))]

    out = []
    for frame in b"".join(asyncio.run(go())).split(b"\n\n"):
        if frame:
            kind, data = frame.split(b"\n")
            event = json.loads(data.removeprefix(b"data: "))
            assert kind == b"event: " + event["type"].encode()
            validate("ResponseStreamEvent", event)
            out.append(event)
    if out[-1]["type"] == "response.completed":  # kept before the client saw it finish
        assert asyncio.run(store.get("acme", out[-1]["response"]["id"]))
    return out


TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]


def test_text_then_a_call_each_opened_filled_and_closed(tmp_path: Path) -> None:
    score = TokenLogprob("Hi", -0.1, [72, 105], [TopLogprob("Hi", -0.1, [72, 105])])
    events: list[Event] = [
        Started(),
        Logprobs([score]),
        TextDelta("Hi"),
        ToolCallDelta(0, "call_1", "f", '{"a":'),
        ToolCallDelta(0, arguments=" 1}"),
        Finished("tool_calls", Usage(5, 4)),
    ]
    out = run(tmp_path, {"input": "hi", "tools": TOOLS}, events)
    assert [e["type"] for e in out] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert out[4]["logprobs"][0]["token"] == "Hi"
    assert out[11]["arguments"] == '{"a": 1}'
    final = out[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["message", "function_call"]
    assert (
        final["output"][0]["id"] == out[2]["item"]["id"] and final["output"][1]["id"] == out[8]["item"]["id"]
    )
    assert final["output"][1]["call_id"] == "call_1" and final["usage"]["total_tokens"] == 9


def test_a_tier_failing_mid_stream_ends_it_with_response_failed(tmp_path: Path) -> None:
    out = run(tmp_path, {"input": "hi"}, [Started(), TextDelta("Hel")], fail=True)
    assert out[-1]["type"] == "response.failed"
    failed = out[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"


def test_an_empty_answer_is_an_empty_message(tmp_path: Path) -> None:
    out = run(tmp_path, {"input": "hi"}, [Started(), Finished("stop", Usage(3, 0))])
    assert out[2]["type"] == "response.output_item.added"
    assert out[-1]["response"]["output"][0]["content"][0]["text"] == ""
