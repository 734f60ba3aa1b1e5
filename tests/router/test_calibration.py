"""The calibration workload: media probes while a tier takes them, and load on both tiers at once."""

from __future__ import annotations

import asyncio
import json

import httpx

from gateway.tools.calibration import calibrate as run_calibration
from gateway.tools.calibration import probe_workload


def test_the_probe_workload_mixes_sizes_streaming_and_media() -> None:
    probes = probe_workload(80, seed=3)
    assert probes == probe_workload(80, seed=3)  # seeded
    with_media = [p for p in probes if p.media]
    assert 8 <= len(with_media) <= 35
    kinds = {part["type"] for p in with_media for part in p.media}
    assert kinds == {"image_url", "video_url"}
    assert {p.stream for p in probes} == {True, False}
    assert len({p.max_tokens for p in probes}) >= 4
    assert not any(p.media for p in probe_workload(40, seed=3, media=False))
    body = with_media[0].body("cloud")
    assert body["model"] == "cloud" and body["messages"][0]["content"][0]["type"] == "text"
    assert isinstance(with_media[0].body("edge", with_media=False)["messages"][0]["content"], str)


def test_calibration_drops_media_a_tier_refuses_and_loads_both_tiers_at_once() -> None:
    """A fake gateway: the edge refuses images and video (400 request_does_not_fit, as the
    router answers); it records how many probes each tier had in flight at once."""
    in_flight = {"edge": 0, "cloud": 0}
    overlapped = []  # (tier, the other tier's in-flight count) at each arrival
    seen: dict[str, list[bool]] = {"edge": [], "cloud": []}

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/admin/api/router/refit":
            return httpx.Response(200, json={"version": 1, "tiers": {}})
        body = json.loads(request.content)
        tier = body["model"]
        has_media = not isinstance(body["messages"][0]["content"], str)
        if tier == "edge" and has_media:
            error = {"error": {"code": "request_does_not_fit", "message": "edge does not accept image"}}
            return httpx.Response(400, json=error)
        seen[tier].append(has_media)
        other = "cloud" if tier == "edge" else "edge"
        overlapped.append((tier, in_flight[other]))
        in_flight[tier] += 1
        await asyncio.sleep(0.01)
        in_flight[tier] -= 1
        return httpx.Response(200, json={"choices": []})

    result = asyncio.run(
        run_calibration("http://gw", "k", "a", ["edge", "cloud"], 24, transport=httpx.MockTransport(handler))
    )
    assert result["sent"] == 48 and result["answered"] == 48  # every refused media probe resent as text
    assert result["text_only"] == ["edge"]
    assert not any(seen["edge"]) and any(seen["cloud"]) and len(seen["edge"]) == len(seen["cloud"]) == 24
    # the first half of each tier's probes ran with the other tier idle, the second half beside it
    assert any(other == 0 for _, other in overlapped)
    assert sum(1 for _, other in overlapped if other > 0) >= 6
