"""Media preprocessing: images, video and audio fetched (behind an SSRF guard), decoded in worker
processes, normalised to what the tiers take, cached by content, and summarised for the router.

    MediaPipeline.prepare(request) → Prepared(request with normalised media, MediaSummary, timings)
"""

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
from gateway.media.pipeline import MediaPipeline, MediaTargets, Prepared, has_media

__all__ = [
    "AudioSettings",
    "FetchSettings",
    "Fetcher",
    "ImageSettings",
    "MediaCacheSettings",
    "MediaFailure",
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
