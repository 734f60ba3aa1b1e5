"""The tenants' settings: per-minute limits (a tenant's own, or the configured default) and where they
are counted.  ``gateway/settings.py`` gathers them under ``[limits]``."""

from __future__ import annotations

import msgspec


class TenantLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Per-minute limits of one tenant; 0 means unlimited."""

    requests_per_min: int = 0
    tokens_per_min: int = 0
    # Media per minute: parts, and seconds of video and audio (as preprocessing measured them).
    images_per_min: int = 0
    audio_per_min: int = 0
    video_per_min: int = 0
    video_seconds_per_min: int = 0
    audio_seconds_per_min: int = 0


class LimitSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Empty: counted in this process. A redis:// URL: shared by every gateway using it.
    redis_url: str = ""
    # Limits of tenants that set none of their own.
    default: TenantLimits = msgspec.field(default_factory=TenantLimits)
