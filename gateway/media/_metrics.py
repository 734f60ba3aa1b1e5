"""Prometheus series of media preprocessing, on the gateway's registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram

if TYPE_CHECKING:
    from gateway.media.pipeline import Prepared

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class MediaMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.stage = Histogram(
            "tiergate_media_stage_seconds",
            "Media preprocessing time per request and stage (fetch_s, cache_s, image_decode_s, "
            "image_resize_s, video_sample_s, audio_decode_s, ...), summed over the request's parts.",
            ["stage"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.cache = Counter(
            "tiergate_media_cache",
            "Decoded-media cache lookups by result (hit, miss).",
            ["result"],
            registry=registry,
        )
        self.parts = Counter(
            "tiergate_media_parts", "Media parts preprocessed, by kind.", ["kind"], registry=registry
        )

    def observe(self, prepared: Prepared) -> None:
        for stage, seconds in prepared.timings.items():
            self.stage.labels(stage).observe(seconds)
        if prepared.cache_hits:
            self.cache.labels("hit").inc(prepared.cache_hits)
        if prepared.cache_misses:
            self.cache.labels("miss").inc(prepared.cache_misses)
        summary = prepared.summary
        for kind, count in (
            ("image", summary.images),
            ("video", summary.videos),
            ("audio", summary.audio_clips),
        ):
            if count:
                self.parts.labels(kind).inc(count)
