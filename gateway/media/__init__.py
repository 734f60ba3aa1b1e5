"""Media preprocessing: images, video and audio fetched (behind an SSRF guard), decoded in worker
processes, normalised to what the tiers take, cached by content, and summarised for the router.

    MediaPipeline.prepare(request) → Prepared(request with normalised media, MediaSummary, timings)

The names below are imported on first use: a decoding worker imports only the decoder modules
(``gateway.media.image``, ``.video``, ``.audio``), not the gateway around them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.media._config import (
        AudioSettings,
        FetchSettings,
        ImageSettings,
        MediaCacheSettings,
        MediaSettings,
        VideoSettings,
    )
    from gateway.media._failure import MediaFailure
    from gateway.media._metrics import MediaMetrics
    from gateway.media.fetch import Fetcher, PublicResolver
    from gateway.media.forward import engine_messages
    from gateway.media.prepare import MediaInfo, MediaPipeline, MediaTargets, Prepared, has_media

__all__ = [
    "AudioSettings",
    "FetchSettings",
    "Fetcher",
    "ImageSettings",
    "MediaCacheSettings",
    "MediaFailure",
    "MediaInfo",
    "MediaMetrics",
    "MediaPipeline",
    "MediaSettings",
    "MediaTargets",
    "Prepared",
    "PublicResolver",
    "VideoSettings",
    "engine_messages",
    "has_media",
]

_MODULE = {
    "AudioSettings": "_config",
    "FetchSettings": "_config",
    "ImageSettings": "_config",
    "MediaCacheSettings": "_config",
    "MediaSettings": "_config",
    "VideoSettings": "_config",
    "MediaFailure": "_failure",
    "MediaMetrics": "_metrics",
    "Fetcher": "fetch",
    "PublicResolver": "fetch",
    "engine_messages": "forward",
    "MediaInfo": "prepare",
    "MediaPipeline": "prepare",
    "MediaTargets": "prepare",
    "Prepared": "prepare",
    "has_media": "prepare",
}


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
