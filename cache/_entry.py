"""What is stored for one answer: enough to replay it as JSON or as the same SSE pieces."""

from __future__ import annotations

import msgspec


class CachedAnswer(msgspec.Struct, frozen=True, array_like=True):
    """An answer as it was produced.  ``pieces`` are the streamed text pieces in order
    (one piece when the answer was not streamed); their concatenation is the text."""

    pieces: list[str]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    tier: str

    @property
    def text(self) -> str:
        return "".join(self.pieces)


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
