"""Why a medium was refused, as a plain picklable value (decoders raise it inside worker processes).

MediaFailure(kind, reason)     kind → HTTP status (gateway/media/prepare.py maps it)
    "invalid"      400  malformed part, bad base64 or URL, fetch failed
    "forbidden"    400  a URL the SSRF guard refuses
    "too_large"    413  bytes, pixels, seconds or parts over a limit
    "unsupported"  415  a format, codec or MIME type this gateway does not decode
    "corrupt"      422  truncated or undecodable data, or decoding ran past its time
"""

from __future__ import annotations

INVALID = "invalid"
FORBIDDEN = "forbidden"
TOO_LARGE = "too_large"
UNSUPPORTED = "unsupported"
CORRUPT = "corrupt"


class MediaFailure(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(kind, reason)
        self.kind = kind
        self.reason = reason

    def __str__(self) -> str:
        return self.reason
