"""Media preprocessing measurements, recorded through the gateway's :class:`~gateway.ops.metrics.Metrics`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gateway.ops.metrics import Metrics
    from router import MediaSummary


class Measured(Protocol):
    """What preparing one request's media measured (``media.prepare.Prepared`` is one)."""

    @property
    def timings(self) -> dict[str, float]: ...  # stage -> seconds, over all parts

    @property
    def cache_hits(self) -> int: ...

    @property
    def cache_misses(self) -> int: ...

    @property
    def summary(self) -> MediaSummary: ...


class MediaMetrics:
    """Stage times (``tiergate_preprocess_seconds``), media-cache lookups and parts per kind."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def observe(self, prepared: Measured) -> None:
        m = self._metrics
        for stage, seconds in prepared.timings.items():
            m.preprocess_observed(stage.removesuffix("_s"), seconds)
        for _ in range(prepared.cache_hits):
            m.media_cache_lookup(True)
        for _ in range(prepared.cache_misses):
            m.media_cache_lookup(False)
        summary = prepared.summary
        for kind, count in (
            ("image", summary.images),
            ("video", summary.videos),
            ("audio", summary.audio_clips),
        ):
            if count:
                m.media_parted(kind, count)
