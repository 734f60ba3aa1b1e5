"""The edge registry and its instances, in process, on the real shipped SmolLM2 GGUF: spreading over
instances, prompt-prefix reuse, hot swap without a dropped request, rollback, validation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from tiers import Completion, Finished, Generation, Health, Started, TextDelta, Tier, collect
from tiers.edge import (
    EdgeConfig,
    EdgeModel,
    EdgeRegistry,
    InvalidModel,
    LlamaCppTier,
    NothingToRollBack,
    UnknownModel,
    shipped_model_path,
)

HELLO = [{"role": "user", "content": "Say hello."}]
# A system prompt long enough (well over 64 tokens) to be worth a saved state.
SYSTEM = (
    "You are the assistant of a small travel agency in Lisbon. You answer questions about trips, "
    "hotels, trains and museums in Portugal. Keep answers short, friendly and factual; when you do not "
    "know something, say so and suggest calling the agency. Never invent prices or opening hours. "
    "Prefer trains over cars, and mention accessibility when it matters."
)


def _gen(messages: list[dict[str, str]], max_tokens: int = 4, affinity: str | None = None) -> Generation:
    return Generation(messages=messages, max_tokens=max_tokens, temperature=0, affinity=affinity)


def _asking(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


@pytest.fixture
def second_gguf(tmp_path: Path) -> Path:
    """A second "version": the same weights under another path."""
    copy = tmp_path / "smollm2-v2.gguf"
    copy.symlink_to(shipped_model_path())
    return copy


def _config(second: Path, **kw: object) -> EdgeConfig:
    models = [
        EdgeModel(name="smol-v1", quality=0.3),
        EdgeModel(name="smol-v2", path=str(second), quality=0.4, context_tokens=1024),
    ]
    return EdgeConfig(instances=1, threads=1, models=models, **kw)  # type: ignore[arg-type]


async def _answer(tier: Tier, gen: Generation) -> Completion:
    return await collect(tier.generate(gen))


async def _first_instance(registry: EdgeRegistry, gen: Generation) -> tuple[str, str]:
    events = registry.generate(gen)
    try:
        started = await anext(events)
    finally:
        await events.aclose()
    assert isinstance(started, Started)
    return started.instance, started.model


async def _idle(registry: EdgeRegistry) -> None:
    """The worker finishes a moment after the answer's last piece (it may save the prompt's state)."""
    for _ in range(200):
        if registry.state().in_flight == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the edge stayed busy")


async def test_requests_spread_over_instances_and_a_conversation_sticks() -> None:
    registry = EdgeRegistry(EdgeConfig(instances=2, threads=1, prefix_cache_mb=0, max_sequences=1))
    await registry.start()
    try:
        assert registry.concurrency == 2 and registry.state().health is Health.READY
        # four at once: two on each instance (least loaded first)
        answers = await asyncio.gather(*(_answer(registry, _gen(HELLO, 6)) for _ in range(4)))
        served = sorted(a.instance for a in answers)
        assert served == ["edge-smollm2-135m/0"] * 2 + ["edge-smollm2-135m/1"] * 2
        # one after another (each instance idle again), the same conversation stays on its instance
        served_a = set()
        for _ in range(3):
            served_a.add((await _answer(registry, _gen(HELLO, 1, affinity="conv-a"))).instance)
            await _idle(registry)
        assert len(served_a) == 1
    finally:
        await registry.aclose()


async def test_closing_a_stream_stops_its_instance_and_not_the_other() -> None:
    registry = EdgeRegistry(EdgeConfig(instances=2, threads=1, prefix_cache_mb=0, max_sequences=1))
    await registry.start()
    essay = [{"role": "user", "content": "Write a very long essay about the history of Rome."}]
    try:
        left, right = registry.generate(_gen(essay, 1500)), registry.generate(_gen(essay, 1500))
        first_left, first_right = await anext(left), await anext(right)
        assert {first_left.instance, first_right.instance} == {"edge-smollm2-135m/0", "edge-smollm2-135m/1"}
        await left.aclose()  # the client went away
        for _ in range(200):
            if registry.state().in_flight == 1:
                break
            await asyncio.sleep(0.02)
        assert registry.state().in_flight == 1  # its engine stopped; the other still writes
        assert isinstance(await anext(right), TextDelta)
        # the freed instance serves at once (the other is busy with its 1,500 tokens)
        answer = await asyncio.wait_for(_answer(registry, _gen(HELLO, 2)), 60)
        assert answer.instance == first_left.instance
        await right.aclose()
    finally:
        await registry.aclose()


async def test_a_saved_prompt_state_is_reused_and_answers_the_same() -> None:
    """A shared system prompt, another prompt in between: the state saved after the first request is
    restored for the third, and the answer equals a cold engine's."""
    cached = LlamaCppTier(EdgeConfig(threads=1))
    cold = LlamaCppTier(EdgeConfig(threads=1, prefix_cache_mb=0))
    await asyncio.gather(cached.start(), cold.start())
    try:
        await _answer(cached, _gen(_asking("Which museum should I see in Lisbon?"), 4))
        await _answer(cached, _gen(HELLO, 4))  # replaces the live context
        assert cached.prefixes.hits == 0
        question = _asking("How do I get from Lisbon to Porto?")
        reused = await _answer(cached, _gen(question, 12))
        assert cached.prefixes.hits == 1
        fresh = await _answer(cold, _gen(question, 12))
        assert reused.text == fresh.text
        assert reused.usage.completion_tokens == fresh.usage.completion_tokens
        assert reused.usage.cached_tokens > fresh.usage.cached_tokens  # the restored system prompt
    finally:
        await asyncio.gather(cached.aclose(), cold.aclose())


async def test_hot_swap_finishes_the_old_versions_requests_and_sends_new_ones_to_the_new(
    second_gguf: Path,
) -> None:
    registry = EdgeRegistry(_config(second_gguf))
    await registry.start()
    try:
        assert registry.capabilities.model == "smol-v1" and registry.capabilities.quality == 0.3
        # a stream running on v1 while v2 is activated
        running = registry.generate(_gen(HELLO, 24))
        first = await anext(running)
        assert first.instance == "smol-v1/0"
        await registry.activate("smol-v2")
        caps = registry.capabilities
        assert (caps.model, caps.quality, caps.max_context_tokens) == ("smol-v2", 0.4, 1024)
        listing = registry.models()
        assert listing["active"] == "smol-v2" and listing["previous"] == "smol-v1"
        assert {m["name"]: m["status"] for m in listing["data"]} == {
            "smol-v1": "draining",
            "smol-v2": "active",
        }
        assert await _first_instance(registry, _gen(HELLO)) == ("smol-v2/0", "smol-v2")
        rest = [d async for d in running]  # the old version finishes what it started
        assert isinstance(rest[-1], Finished)  # with its finish reason and usage
        for _ in range(100):
            if registry.models()["data"][0]["status"] == "available":
                break
            await asyncio.sleep(0.05)
        assert registry.models()["data"][0]["status"] == "available"  # closed once empty
        assert await registry.rollback() == "smol-v1"
        assert (await _answer(registry, _gen(HELLO, 1))).instance == "smol-v1/0"
        with pytest.raises(NothingToRollBack):
            await registry.rollback()
    finally:
        await registry.aclose()


async def test_bad_versions_are_refused_and_the_current_one_keeps_serving(tmp_path: Path) -> None:
    registry = EdgeRegistry(EdgeConfig(threads=1, instances=1))
    await registry.start()
    try:
        with pytest.raises(UnknownModel):
            await registry.activate("nope")
        with pytest.raises(InvalidModel, match="is not a file"):
            registry.register(EdgeModel(name="gone", path=str(tmp_path / "missing.gguf")))
        (tmp_path / "text.gguf").write_text("not a model")
        with pytest.raises(InvalidModel, match="not a GGUF file"):
            registry.register(EdgeModel(name="text", path=str(tmp_path / "text.gguf")))
        with pytest.raises(InvalidModel, match=r"lacks decoder\.json"):
            registry.register(EdgeModel(name="onnx", backend="onnx", path=str(tmp_path)))
        # a GGUF header with nothing behind it registers, then fails to load: v1 keeps serving
        (tmp_path / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 64)
        registry.register(EdgeModel(name="broken", path=str(tmp_path / "broken.gguf")))
        with pytest.raises(InvalidModel, match=r"did not load.*still serving edge-smollm2-135m"):
            await registry.activate("broken")
        assert registry.active == "edge-smollm2-135m"
        assert (await _answer(registry, _gen(HELLO, 1))).usage.completion_tokens == 1
    finally:
        await registry.aclose()


@pytest.mark.parametrize(
    ("models", "says"),
    [
        ([{"name": "a"}, {"name": "a"}], "more than one version is named a"),
        ([{"name": "a", "quality": 1.5}], "<= 1.0"),
        ([{"name": "a", "modalities": ["smell"]}], "modalities"),
        ([{"name": "has space"}], "name"),
        ([{"name": "a", "context_tokens": 0}], "context_tokens"),
    ],
)
def test_invalid_model_settings_are_refused(models: list[dict[str, object]], says: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=says):
        msgspec.convert({"models": models}, EdgeConfig)


def test_active_must_name_a_configured_version() -> None:
    with pytest.raises(msgspec.ValidationError, match="no model named 'b'"):
        msgspec.convert({"models": [{"name": "a"}], "active": "b"}, EdgeConfig)
