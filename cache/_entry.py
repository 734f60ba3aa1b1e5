"""What is stored for one answer: enough to replay it as JSON or as the same SSE pieces."""

from __future__ import annotations

import msgspec


class CachedAnswer(msgspec.Struct, frozen=True, array_like=True, tag=2):
    """An answer as it was produced: ``events`` are the tier's events in order (text pieces as they
    were streamed, tool-call pieces, logprobs, the finish), encoded by the gateway; the cache keeps
    them as bytes.  ``tag`` is the format's version: entries of an older format are misses."""

    events: bytes
    model: str
    tier: str


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(CachedAnswer)


def encode_answer(answer: CachedAnswer) -> bytes:
    return _encoder.encode(answer)


def decode_answer(data: bytes) -> CachedAnswer | None:
    """The answer in ``data``, or None when it is unreadable (an older format: a miss)."""
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError:
        return None
