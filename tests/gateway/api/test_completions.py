"""Legacy completions without a server: the strict request and its one translation to the chat
request, the pipeline's raw-prompt mode as a tier sees it, and the ``text_completion`` framing (JSON
and chunks, every one valid against OpenAI's schema)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api.completions import IN_FLIGHT, event_stream, json_body, parse_completions, start
from gateway.errors import InvalidRequest
from gateway.pipeline.answer import Answer, Routed, whole
from gateway.pipeline.chat import RequestContext
from gateway.pipeline.front import Incoming
from tests.gateway.pipeline.test_chat_service import service
from tests.openai_schema import COMPLETION, validate
from tiers import (
    ChoiceDone,
    Event,
    Finished,
    Logprobs,
    Started,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
    collect,
)


def parse(**body: Any) -> Any:
    return parse_completions(json.dumps({"model": "edge", "prompt": "Once upon a time", **body}).encode())


def test_a_prompt_becomes_one_user_turn_with_the_sampling_fields_passed_on() -> None:
    asked = parse(temperature=0.5, top_p=0.9, stop=["\n"], seed=7, logprobs=2, n=2, user="u1")
    (request,) = asked.requests
    assert [m.content for m in request.messages] == ["Once upon a time"]
    assert request.messages[0].role == "user"
    assert (request.temperature, request.top_p, request.stop, request.seed, request.n) == (
        0.5,
        0.9,
        ["\n"],
        7,
        2,
    )
    assert (request.logprobs, request.top_logprobs, request.user) == (True, 2, "u1")
    assert request.max_tokens == 16  # OpenAI's default for this endpoint
    assert (asked.n, asked.echo, asked.stream, asked.prompts) == (2, False, False, ["Once upon a time"])


def test_a_list_of_prompts_is_one_request_each() -> None:
    asked = parse(prompt=["a", "b", "c"], stream=True, stream_options={"include_usage": True})
    assert [r.messages[0].content for r in asked.requests] == ["a", "b", "c"]
    assert asked.stream and asked.include_usage and all(r.stream for r in asked.requests)


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"suffix": " the end."}, "suffix", "fill-in-the-middle"),
        ({"best_of": 3}, "best_of", "best_of other than n"),
        ({"echo": True, "logprobs": 1}, "logprobs", "prompt's own tokens"),
        ({"prompt": [1, 2, 3]}, "prompt", "token-array prompts"),
        ({"prompt": [[1, 2], [3]]}, "prompt", "token-array prompts"),
        ({"prompt": ""}, "prompt", "empty"),
        ({"prompt": []}, "prompt", "length"),
        ({"prompt": ["x"] * 17}, "prompt", "length"),
        ({"logprobs": 6}, "logprobs", "<= 5"),
        ({"max_tokens": 0}, "max_tokens", ">= 1"),
        ({"messages": []}, "messages", "Unrecognized request argument supplied: messages"),
        ({"tools": []}, "tools", "Unrecognized request argument supplied: tools"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when stream"),
        ({"logit_bias": {"x": 1}}, "logit_bias", "token ids"),
    ],
)
def test_what_is_not_supported_or_not_valid_is_a_400_naming_it(
    body: dict[str, Any], param: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(**body)
    assert refused.value.param == param
    assert says in str(refused.value)


def test_best_of_equal_to_n_and_an_empty_suffix_are_fine() -> None:
    assert parse(best_of=2, n=2, suffix="").n == 2


async def test_the_tier_gets_the_raw_prompt_and_the_cache_keeps_raw_and_chat_apart(tmp_path: Path) -> None:
    chat, edge, _ = service(tmp_path)
    (request,) = parse(model="edge", prompt="Say hello.", max_tokens=8, temperature=0).requests
    raw = await chat.answer(request, "r1", RequestContext(raw_prompt=True))
    await collect(raw.events)
    assert edge.calls[-1].prompt == "Say hello." and len(edge.calls) == 1
    chatted = await chat.answer(request, "r2", RequestContext())
    await collect(chatted.events)
    assert edge.calls[-1].prompt is None and len(edge.calls) == 2  # not the raw answer from the cache
    again = await chat.answer(request, "r3", RequestContext(raw_prompt=True))
    assert again.routed.cache.value == "hit" and len(edge.calls) == 2


def _answer(events: list[Event], tier: str = "edge") -> Answer:
    return whole(Routed(tier, "pinned"), "edge-model", events, "x")


SCORED = [
    TokenLogprob(" a", -0.5, None, [TopLogprob(" a", -0.5), TopLogprob(" b", -1.5)]),
    TokenLogprob(" king", -1.0, None, [TopLogprob(" king", -1.0)]),
]


async def test_json_answers_of_two_prompts_are_one_text_completion() -> None:
    first = _answer([Started(), Logprobs(SCORED), TextDelta(" a king"), Finished("length", Usage(4, 2))])
    second = _answer([Started(), TextDelta(" b"), Finished("stop", Usage(3, 1))])
    body = json.loads(await json_body([first, second], ["p0", "p1"], 1, False, "r9"))
    validate(COMPLETION, body)
    assert body["id"] == "cmpl-r9" and body["object"] == "text_completion"
    assert [(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]] == [
        (0, " a king", "length"),
        (1, " b", "stop"),
    ]
    assert body["choices"][0]["logprobs"] == {
        "tokens": [" a", " king"],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{" a": -0.5, " b": -1.5}, {" king": -1.0}],
        "text_offset": [0, 2],
    }
    assert body["choices"][1]["logprobs"] is None
    assert body["usage"]["prompt_tokens"] == 7 and body["usage"]["completion_tokens"] == 3


async def test_echo_puts_the_prompt_before_each_choice() -> None:
    answer = _answer(
        [
            Started(),
            TextDelta(" x"),
            TextDelta(" y", 1),
            ChoiceDone(1, "stop"),
            Finished("length", Usage(2, 2)),
        ]
    )
    body = json.loads(await json_body([answer], ["Hi"], 2, True, "r"))
    validate(COMPLETION, body)
    assert [(c["index"], c["text"]) for c in body["choices"]] == [(0, "Hi x"), (1, "Hi y")]


def done(answer: Answer) -> Callable[[], Awaitable[Answer]]:
    async def run() -> Answer:
        return answer

    return run


def chunks_of(frames: list[bytes]) -> list[dict[str, Any]]:
    """The chunks' JSON, each checked against OpenAI's schema: OpenAI's API sends ``finish_reason: null``
    until a choice ends, which its published schema (a string) leaves out, so that alone is allowed."""
    text = b"".join(frames).decode()
    assert text.endswith("data: [DONE]\n\n")
    out = []
    for line in text.split("\n\n")[:-2]:
        chunk = json.loads(line.removeprefix("data: "))
        out.append(chunk)
        validate(
            COMPLETION,
            {
                **chunk,
                "choices": [{**c, "finish_reason": c["finish_reason"] or "stop"} for c in chunk["choices"]],
            },
        )
    return out


async def test_streamed_chunks_of_two_prompts_with_echo_logprobs_and_usage() -> None:
    first = _answer(
        [
            Started(),
            Logprobs(SCORED[:1]),
            TextDelta(" a"),
            Logprobs(SCORED[1:]),
            TextDelta(" king"),
            Finished("length", Usage(4, 2)),
        ]
    )
    second = _answer([Started(), TextDelta(" b"), Finished("stop", Usage(3, 1))])
    frames = [
        f
        async for f in event_stream(
            first, [done(second)], ["p0", "p1"], 1, echo=True, include_usage=True, rid="r"
        )
    ]
    chunks = chunks_of(frames)
    assert all(c["object"] == "text_completion" and c["id"] == "cmpl-r" for c in chunks)
    pieces = [
        (c["choices"][0]["index"], c["choices"][0]["text"], c["choices"][0]["finish_reason"])
        for c in chunks
        if c["choices"]
    ]
    assert pieces == [
        (0, "p0", None),
        (0, " a", None),
        (0, " king", None),
        (0, "", "length"),
        (1, "p1", None),
        (1, " b", None),
        (1, "", "stop"),
    ]
    offsets = [
        c["choices"][0]["logprobs"]["text_offset"]
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
    ]
    assert offsets == [[0], [2]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 10


async def test_a_failure_mid_stream_is_an_error_event_and_later_prompts_are_not_run() -> None:
    closed: list[bool] = []

    async def failing() -> Any:
        try:
            yield TextDelta(" a")
            raise RuntimeError("engine fell over")
        finally:
            closed.append(True)

    broken = Answer(Routed("edge", "pinned"), "m", failing(), "x")
    runs: list[str] = []

    async def later() -> Answer:
        runs.append("p1")
        return _answer([Started(), TextDelta(" b"), Finished("stop", Usage(3, 1))])

    frames = [
        f
        async for f in event_stream(
            broken, [later], ["p0", "p1"], 1, echo=False, include_usage=False, rid="r"
        )
    ]
    assert b'"error"' in frames[-1] and b"[DONE]" not in b"".join(frames)
    assert closed == [True] and runs == []


async def test_a_later_prompt_that_fails_to_begin_is_an_error_event() -> None:
    first = _answer([Started(), TextDelta(" a"), Finished("stop", Usage(3, 1))])

    async def refused() -> Answer:
        raise InvalidRequest("too many requests, pretend")

    frames = [
        f
        async for f in event_stream(
            first, [refused], ["p0", "p1"], 1, echo=False, include_usage=True, rid="r"
        )
    ]
    text = b"".join(frames)
    assert b'" a"' in text and b"pretend" in frames[-1] and b"[DONE]" not in text


class FakePipeline:
    """Answers each run after a moment; counts how many are in flight at once; fails one prompt."""

    def __init__(self, failing: str | None = None) -> None:
        self.failing = failing
        self.in_flight = self.most = 0
        self.ids: list[str] = []
        self.closed: list[str] = []

    async def run(self, incoming: Any) -> Answer:
        request = await incoming.parse(await incoming.body(), "default")
        prompt = request.messages[0].content
        self.ids.append(incoming.request_id)
        assert incoming.raw_prompt
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        if prompt == self.failing:
            raise InvalidRequest(f"{prompt} refused")

        async def events() -> Any:
            try:
                yield TextDelta(f" after {prompt}")
                yield Finished("stop", Usage(1, 1))
            finally:
                self.closed.append(prompt)

        return Answer(Routed("edge", "pinned"), "m", events(), "x")


class FakeAuth:
    async def caller(self, headers: Any) -> None:
        return None


def _body(**kw: Any) -> Callable[[], Awaitable[bytes]]:
    async def read() -> bytes:
        return json.dumps({"model": "edge", "max_tokens": 2, **kw}).encode()

    return read


def _incoming(**kw: Any) -> Incoming:
    return Incoming({}, _body(**kw), "rid")


async def test_a_json_request_runs_at_most_four_prompts_at_once_each_with_its_own_id() -> None:
    pipeline = FakePipeline()
    prompts = [f"p{i}" for i in range(9)]
    asked, answers, later = await start(pipeline, FakeAuth(), _incoming(prompt=prompts))  # type: ignore[arg-type]
    assert later == [] and len(answers) == 9 and pipeline.most == IN_FLIGHT == 4
    assert sorted(pipeline.ids) == sorted(["rid", *(f"rid-{i}" for i in range(1, 9))])
    body = json.loads(await json_body(answers, asked.prompts, asked.n, asked.echo, "rid"))
    assert [c["text"] for c in body["choices"]] == [f" after {p}" for p in prompts]


async def test_one_failing_prompt_fails_a_json_request() -> None:
    pipeline = FakePipeline(failing="p1")
    with pytest.raises(InvalidRequest, match="p1 refused"):
        await start(pipeline, FakeAuth(), _incoming(prompt=["p0", "p1", "p2"]))  # type: ignore[arg-type]


async def test_a_stream_begins_the_next_prompt_only_after_the_one_before() -> None:
    pipeline = FakePipeline()
    asked, answers, later = await start(
        pipeline,  # type: ignore[arg-type]
        FakeAuth(),  # type: ignore[arg-type]
        _incoming(prompt=["p0", "p1"], stream=True),
    )
    assert len(answers) == 1 and len(later) == 1 and pipeline.ids == ["rid"]
    frames = [
        f
        async for f in event_stream(
            answers[0], later, asked.prompts, 1, echo=False, include_usage=False, rid="rid"
        )
    ]
    assert pipeline.ids == ["rid", "rid-1"] and pipeline.most == 1 and pipeline.closed == ["p0", "p1"]
    assert [c["choices"][0]["text"] for c in chunks_of(frames)] == [" after p0", "", " after p1", ""]
