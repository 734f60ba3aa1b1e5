"""The OpenAI API end to end on the cloud tier: a real vLLM server that the gateway starts and supervises."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import Gateway

# Both answers from the tier itself, not one of them a cache replay.
FRESH = {"Cache-Control": "no-cache"}

pytestmark = pytest.mark.cloud

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


def test_chat_on_the_cloud(cloud_gateway: Gateway) -> None:
    raw = cloud_gateway.client().chat.completions.with_raw_response.create(
        model="cloud", messages=QUESTION, max_tokens=16, temperature=0
    )
    completion = raw.parse()
    assert raw.headers["x-tiergate-tier"] == "cloud"
    assert completion.model == "cloud-smolvlm-135m"
    assert "paris" in (completion.choices[0].message.content or "").lower()
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 5 and 0 < usage.completion_tokens <= 16


def test_cloud_stream_matches_non_stream_and_reports_usage(cloud_gateway: Gateway) -> None:
    client = cloud_gateway.client()
    whole = client.chat.completions.create(
        model="cloud", messages=QUESTION, max_tokens=16, temperature=0, extra_headers=FRESH
    )
    chunks = list(
        client.chat.completions.create(
            model="cloud",
            messages=QUESTION,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=FRESH,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage == whole.usage
    assert all(c.model == "cloud-smolvlm-135m" for c in chunks)


def test_auto_sends_a_long_answer_to_the_cloud(cloud_gateway: Gateway) -> None:
    raw = cloud_gateway.client().chat.completions.with_raw_response.create(
        model="tiergate-auto", messages=QUESTION, max_tokens=400, temperature=0
    )
    assert raw.headers["x-tiergate-tier"] == "cloud"
    assert raw.headers["x-tiergate-route-reason"] == "cloud: max_tokens 400 > 256"
    assert raw.parse().choices[0].finish_reason == "stop"


def test_cloud_rejection_is_a_400_that_says_why(cloud_gateway: Gateway) -> None:
    # vLLM itself refuses top_p=0 (it wants 0 < top_p <= 1); the gateway passes the reason on
    with pytest.raises(openai.BadRequestError) as caught:
        cloud_gateway.client().chat.completions.create(
            model="cloud", messages=QUESTION, max_tokens=4, top_p=0
        )
    assert "cloud tier rejected the request" in caught.value.message


def test_readiness_lists_the_cloud_replica(cloud_gateway: Gateway) -> None:
    tiers = {t["name"]: t for t in cloud_gateway.readyz()["tiers"]}
    assert tiers["cloud"]["health"] == "ready"
    assert tiers["cloud"]["detail"] == "1/1 replicas healthy"
