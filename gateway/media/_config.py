"""Typed settings of media preprocessing (the ``[media]`` section)."""

from __future__ import annotations

import msgspec


class FetchSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Downloading media named by URL: public addresses only, bounded in size and time."""

    allow_http: bool = False  # https only unless this is set
    # Host names (exact, or ".example.com" for a domain and its subdomains); empty: any public host.
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    denied_hosts: list[str] = msgspec.field(default_factory=list)
    connect_timeout_s: float = 3.0
    total_timeout_s: float = 10.0
    max_redirects: int = 3


class ImageSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Decompression-bomb guard: a larger source (width x height in its header) is refused, unread.
    max_source_pixels: int = 40_000_000
    # Images are shrunk to at most this many pixels (and the tiers' own max_image_pixels).
    max_pixels: int = 1_048_576
    jpeg_quality: int = 90


DEFAULT_VIDEO_CONTAINERS = ("mov", "mp4", "matroska", "webm", "avi", "mpegts", "ogg")
DEFAULT_VIDEO_CODECS = (
    "h264",
    "hevc",
    "vp8",
    "vp9",
    "av1",
    "mpeg4",
    "mpeg1video",
    "mpeg2video",
    "mjpeg",
    "theora",
)


class VideoSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    sample_fps: float = 1.0  # frames taken per second of video ...
    max_frames: int = 8  # ... at most this many, spread over the whole clip
    max_seconds: float = 600.0  # longer videos are refused
    frame_max_pixels: int = 65_536  # each frame shrunk to at most this (256 x 256)
    # A clip whose frames are larger (in its headers, or any frame decoded) is refused (413), unread.
    max_frame_pixels: int = 8_847_360  # 4096 x 2160
    # Pixels decoded to take the samples (seeking decodes from the keyframe before each), for all the
    # videos of one request together (each gets an equal share); past it: 413.
    max_request_pixels: int = 2_000_000_000
    # FFmpeg demuxers (container formats) and codecs that are decoded; anything else: 415, unparsed.
    containers: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_VIDEO_CONTAINERS))
    codecs: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_VIDEO_CODECS))


class AudioSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    sample_rate: int = 16_000  # decoded, downmixed to mono, resampled to this
    max_seconds: float = 600.0


class MediaCacheSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    directory: str = ""  # empty: <data_dir>/cache/media
    max_bytes: int = 536_870_912
    # Its one SQLite connection's page cache and memory map, in MiB (as [cache] sqlite_cache_mib).
    sqlite_cache_mib: int = 4
    sqlite_mmap_mib: int = 0


class MediaSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    workers: int = 2  # decoding processes
    timeout_s: float = 20.0  # one medium: download + decode, whatever it is
    max_parts: int = 16  # media parts in one request
    max_part_bytes: int = 20_971_520  # one medium, decoded from base64 or downloaded
    # Media parts being fetched or decoded at once, all requests together; a request whose parts do
    # not fit is a 429 (Retry-After) at once, rather than a queue that grows without bound.
    max_in_flight: int = 64
    fetch: FetchSettings = msgspec.field(default_factory=FetchSettings)
    image: ImageSettings = msgspec.field(default_factory=ImageSettings)
    video: VideoSettings = msgspec.field(default_factory=VideoSettings)
    audio: AudioSettings = msgspec.field(default_factory=AudioSettings)
    cache: MediaCacheSettings = msgspec.field(default_factory=MediaCacheSettings)
