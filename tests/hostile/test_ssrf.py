"""The SSRF guard through a real gateway: a legacy numeric IPv4 form of loopback in an image URL is a
400 in OpenAI's shape that says why, made before any connection (every form here means this machine,
so even a broken guard would send nothing off it; tests/gateway/media/test_fetch.py stubs the resolver
and the connector for the rest)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Gateway


@pytest.mark.parametrize("host", ["127.1", "0177.0.0.1", "0x7f.1", "0", "2130706433"])
def test_numeric_loopback_forms_are_400(target: Gateway, host: str) -> None:
    part = {"type": "image_url", "image_url": {"url": f"https://{host}:{target.url.rsplit(':', 1)[1]}/a.png"}}
    body = {"model": "cloud", "messages": [{"role": "user", "content": [part]}], "max_tokens": 4}
    resp = httpx.post(f"{target.url}/v1/chat/completions", json=body, headers=target.auth, timeout=30)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert "non-canonical numeric IPv4" in error["message"] and set(error) == {
        "message",
        "type",
        "param",
        "code",
    }
