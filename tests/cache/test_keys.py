from __future__ import annotations

import msgspec

from cache import CachedAnswer, decode_answer, encode_answer, result_key

HELLO = [{"role": "user", "content": "Say hello."}]
PARAMS = {"max_tokens": 8, "temperature": 0.0, "seed": None}


def image(url: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]


def test_same_request_same_key_and_key_starts_with_the_tenant() -> None:
    a = result_key("acme", "rule1", HELLO, PARAMS)
    assert a == result_key("acme", "rule1", [dict(m) for m in HELLO], dict(PARAMS))
    assert a.startswith("v1/acme/")


def test_tenant_rule_messages_and_params_each_change_the_key() -> None:
    base = result_key("acme", "rule1", HELLO, PARAMS)
    assert result_key("globex", "rule1", HELLO, PARAMS) != base
    assert result_key("acme", "rule2", HELLO, PARAMS) != base
    assert result_key("acme", "rule1", [{"role": "user", "content": "Say hi."}], PARAMS) != base
    assert result_key("acme", "rule1", HELLO, {**PARAMS, "max_tokens": 9}) != base
    assert result_key("acme", "rule1", HELLO, {**PARAMS, "seed": 1}) != base


def test_tenant_names_cannot_collide_through_the_separator() -> None:
    assert result_key("a/b", "r", HELLO, PARAMS) != result_key("a", "b/r", HELLO, PARAMS)
    assert result_key("a/b", "r", HELLO, PARAMS).startswith("v1/a%2Fb/")


def test_key_ignores_key_order_none_values_and_text_part_wrapping() -> None:
    base = result_key("t", "r", HELLO, PARAMS)
    assert result_key("t", "r", HELLO, {"temperature": 0.0, "max_tokens": 8}) == base
    wrapped = [{"content": [{"type": "text", "text": "Say hello."}], "role": "user", "name": None}]
    assert result_key("t", "r", wrapped, PARAMS) == base


def test_media_parts_are_keyed_by_content_hash() -> None:
    one = result_key("t", "r", image("data:image/png;base64,AAAA"), PARAMS)
    assert one == result_key("t", "r", image("data:image/png;base64,AAAA"), PARAMS)
    assert one != result_key("t", "r", image("data:image/png;base64,AAAB"), PARAMS)
    assert len(one) < 100


def test_answers_round_trip_and_garbage_is_a_miss() -> None:
    answer = CachedAnswer(b"\x92\x01\x02", "m", "edge")
    assert decode_answer(encode_answer(answer)) == answer
    assert decode_answer(b"\x00garbage") is None
    # an entry of the format before tool calls and logprobs (text pieces, counts) is a miss
    older = msgspec.msgpack.encode([["Hel", "lo"], "stop", 5, 2, "m", "edge"])
    assert decode_answer(older) is None


def test_a_redis_url_is_shown_without_its_password() -> None:
    from cache._redis import RedisStore, shown_url

    assert shown_url("redis://:s3cret@10.0.0.5:6380/2") == "redis://10.0.0.5:6380/2"
    assert (
        shown_url("rediss://user:s3cret@cache.internal/0?ssl_cert_reqs=none") == "rediss://cache.internal/0"
    )
    store = RedisStore("redis://:s3cret@127.0.0.1:1/0", prefix="t:", timeout_s=0.2)
    assert "s3cret" not in store._url
