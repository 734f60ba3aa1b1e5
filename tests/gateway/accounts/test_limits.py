"""Per-tenant rate limits, in one process and shared through a real Redis."""

from __future__ import annotations

import pytest

from gateway.accounts.tenants import (
    Demand,
    KeyLimits,
    LocalLimiter,
    RateLimiter,
    RedisLimiter,
    Tenant,
    TenantLimits,
    key_scope,
)
from gateway.errors import RateLimited


def _tenant(tid: int, **limits: int) -> Tenant:
    return Tenant(id=tid, name=f"t{tid}", created_at=0.0, limits=TenantLimits(**limits))


TEXT_ONLY = Demand()


async def _admitted(limiter: RateLimiter, tenant: Tenant, n: int, demand: Demand = TEXT_ONLY) -> int:
    ok = 0
    for _ in range(n):
        try:
            await limiter.admit(tenant, demand)
            ok += 1
        except RateLimited as exc:
            assert 1 <= int(exc.headers()["Retry-After"]) <= 60
            assert exc.status == 429 and tenant.name in exc.message
    return ok


async def _check_limits(limiter: RateLimiter) -> None:
    a, b = _tenant(1, requests_per_min=3), _tenant(2, requests_per_min=5)
    assert await _admitted(limiter, a, 10) == 3
    assert await _admitted(limiter, b, 10) == 5  # one tenant's use is not another's
    tokens = _tenant(3, tokens_per_min=100)
    await limiter.admit(tokens, Demand())
    await limiter.charge_tokens(tokens, 100)
    with pytest.raises(RateLimited, match="100 tokens per minute"):
        await limiter.admit(tokens, Demand())
    images = _tenant(4, images_per_min=3)
    assert await _admitted(limiter, images, 5, Demand(images=2)) == 1
    assert await _admitted(limiter, images, 5, Demand()) == 5  # text-only requests do not count images
    unlimited = _tenant(5)
    assert await _admitted(limiter, unlimited, 50) == 50


async def test_local_limits_per_tenant_and_per_modality() -> None:
    await _check_limits(LocalLimiter())


async def test_redis_limits_per_tenant_and_per_modality(redis_url: str) -> None:
    limiter = RedisLimiter(redis_url, prefix="test1")
    try:
        await _check_limits(limiter)
    finally:
        await limiter.aclose()


async def test_two_limiters_on_one_redis_share_the_limit(redis_url: str) -> None:
    first, second = RedisLimiter(redis_url), RedisLimiter(redis_url)
    tenant = _tenant(7, requests_per_min=4)
    try:
        admitted = 0
        for _ in range(5):
            admitted += await _admitted(first, tenant, 1) + await _admitted(second, tenant, 1)
        assert admitted == 4
    finally:
        await first.aclose()
        await second.aclose()


async def _check_media_seconds(limiter: RateLimiter) -> None:
    video = _tenant(21, video_seconds_per_min=60)
    assert await _admitted(limiter, video, 5, Demand(video=1, video_seconds=25)) == 2  # 50 s of 60
    assert await _admitted(limiter, video, 1, Demand(video=1, video_seconds=10)) == 1  # 60 of 60
    with pytest.raises(RateLimited, match="60 video seconds per minute"):
        await limiter.admit(video, Demand(video=1, video_seconds=1))
    assert await _admitted(limiter, video, 3, Demand()) == 3  # text is not held back by video
    audio = _tenant(22, audio_seconds_per_min=30)
    assert await _admitted(limiter, audio, 4, Demand(audio=1, audio_seconds=12)) == 2
    assert await _admitted(limiter, audio, 2, Demand(video=1, video_seconds=100)) == 2  # another counter


async def test_video_and_audio_seconds_per_minute_locally() -> None:
    await _check_media_seconds(LocalLimiter())


async def test_video_and_audio_seconds_per_minute_over_redis(redis_url: str) -> None:
    limiter = RedisLimiter(redis_url, prefix="test-seconds")
    try:
        await _check_media_seconds(limiter)
    finally:
        await limiter.aclose()


def test_demand_counts_parts_and_the_measured_seconds() -> None:
    from gateway.pipeline.record import demand_of
    from gateway.wire.chat import parse_chat_request
    from router import MediaSummary

    body = (
        b'{"model":"cloud","messages":[{"role":"user","content":['
        b'{"type":"image_url","image_url":{"url":"https://a.example/x.png"}},'
        b'{"type":"video_url","video_url":{"url":"https://a.example/v.mp4"}},'
        b'{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}'
    )
    media = MediaSummary(images=1, videos=1, video_seconds=12.2, audio_clips=1, audio_seconds=3.0)
    demand = demand_of(parse_chat_request(body), media)
    assert demand == Demand(images=1, audio=1, video=1, video_seconds=13, audio_seconds=3)


async def test_a_keys_own_limits_are_counted_apart_from_its_tenants_and_shared_over_redis(
    redis_url: str,
) -> None:
    """Two gateways on one Redis: a key of 3 requests/min gets 3 between them; its tenant (id 1, the
    same number as no key's scope can have) and another key are counted apart."""
    first, second = RedisLimiter(redis_url, prefix="keys"), RedisLimiter(redis_url, prefix="keys")
    key = key_scope("000000000001", KeyLimits(requests_per_min=3))
    other = key_scope("000000000002", KeyLimits(requests_per_min=3, tokens_per_min=10))
    assert key is not None and other is not None and key.id < 0 and other.id < 0 and key.id != other.id
    assert key_scope("000000000003", KeyLimits(budget_day_usd=1)) is None  # no per-minute limit of its own
    try:
        assert await _admitted(first, key, 2) + await _admitted(second, key, 2) == 3
        assert await _admitted(first, _tenant(1, requests_per_min=3), 3) == 3
        await second.admit(other, Demand())
        await first.charge_tokens(other, 10)
        with pytest.raises(RateLimited, match="key '000000000002' is over its limit of 10 tokens"):
            await second.admit(other, Demand())
    finally:
        await first.aclose()
        await second.aclose()
