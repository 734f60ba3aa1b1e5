"""Video through a real gateway: a tiny clip with huge frames, and a codec off the allow-list, are
4xx answers that say why (not a 503 after a decode worker has allocated gigabytes), and the gateway
keeps serving."""

from __future__ import annotations

import httpx

from tests.conftest import Gateway
from tests.faults._support import chat
from tests.gateway.media.test_video_limits import flat_clip
from tests.media_files import data_uri


def send_video(gw: Gateway, clip: bytes) -> httpx.Response:
    part = {"type": "video_url", "video_url": {"url": data_uri("video/mp4", clip)}}
    body = {"model": "cloud", "messages": [{"role": "user", "content": [part]}], "max_tokens": 4}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=gw.auth, timeout=60)


def test_huge_frames_are_413_and_the_gateway_keeps_serving(target: Gateway) -> None:
    resp = send_video(target, flat_clip(8192, 8192))
    assert resp.status_code == 413, resp.text
    error = resp.json()["error"]
    assert "8192x8192" in error["message"] and "max_frame_pixels" in error["message"]
    assert error["param"] == "messages[0].content[0]"
    assert chat(target).status_code == 200


def test_a_codec_off_the_allow_list_is_415(target: Gateway) -> None:
    resp = send_video(target, flat_clip(64, 48, codec="ffv1", container="matroska", options={}))
    assert resp.status_code == 415, resp.text
    assert "codec (ffv1)" in resp.json()["error"]["message"]
