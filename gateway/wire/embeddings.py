"""``POST /v1/embeddings``: OpenAI's request, decoded strictly, and its answer.

``input`` is a string, a list of strings, a list of token ids or a list of such lists; token ids are the
embedding model's own vocabulary (all-MiniLM-L6-v2's WordPiece ids), not OpenAI's. An unknown field, an
empty input and a wrong type are 400s naming the field. ``encoding_format`` is ``float`` (default) or
``base64`` (the little-endian float32 bytes, as OpenAI sends them). ``dimensions`` may only name the
model's own size: all-MiniLM-L6-v2 was not trained to be cut (Matryoshka), so a shorter vector is refused
(400) rather than served worse without saying so.
"""

from __future__ import annotations

import base64
from typing import Annotated, Literal

import msgspec
import numpy as np

from gateway.errors import InvalidRequest
from gateway.wire.decoding import decode_body
from tiers.embedding import Vectors

MAX_INPUTS = 2048  # OpenAI's: inputs in one request, and token ids in one input
TokenId = Annotated[int, msgspec.Meta(ge=0)]
TokenRow = Annotated[list[TokenId], msgspec.Meta(max_length=MAX_INPUTS)]
# msgspec decodes one list type in a union; the list's items are checked to be all of one kind below.
Input = str | Annotated[list[str | TokenId | TokenRow], msgspec.Meta(max_length=MAX_INPUTS)]


class EmbeddingRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    input: Input
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, msgspec.Meta(ge=1)] | None = None
    user: Annotated[str, msgspec.Meta(max_length=256)] | None = None


_decoder = msgspec.json.Decoder(EmbeddingRequest)


def parse_embedding_request(body: bytes) -> EmbeddingRequest:
    return decode_body(_decoder, body, "embeddings request")


def inputs_of(request: EmbeddingRequest) -> list[str] | list[list[int]]:
    """The inputs as a list of texts or a list of token-id rows (never empty, no empty item)."""
    raw = request.input
    items: list[str] | list[list[int]]
    if isinstance(raw, str):
        items = [raw]
    elif not raw:
        raise InvalidRequest("'input' is empty; send a string or a non-empty list", param="input")
    elif all(isinstance(x, int) for x in raw):
        items = [[x for x in raw if isinstance(x, int)]]  # one row of token ids
    elif all(isinstance(x, str) for x in raw):
        items = [x for x in raw if isinstance(x, str)]
    elif all(isinstance(x, list) for x in raw):
        items = [x for x in raw if isinstance(x, list)]
    else:
        raise InvalidRequest(
            "'input' mixes kinds; send strings, token ids, or lists of token ids, one kind", param="input"
        )
    for i, item in enumerate(items):
        if not item or (isinstance(item, str) and not item.strip()):
            raise InvalidRequest(
                f"'input[{i}]' is empty; every input must have text or tokens", param="input"
            )
    return items


class EmbeddingItem(msgspec.Struct):
    index: int
    embedding: list[float] | str
    object: str = "embedding"


class EmbeddingUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct):
    data: list[EmbeddingItem]
    model: str
    usage: EmbeddingUsage
    object: str = "list"


_encoder = msgspec.json.Encoder()


def encode_embeddings(vectors: Vectors, model: str, tokens: int, encoding: str) -> bytes:
    if encoding == "base64":
        little = vectors.astype("<f4", copy=False)
        data = [EmbeddingItem(i, base64.b64encode(row.tobytes()).decode()) for i, row in enumerate(little)]
    else:
        data = [EmbeddingItem(i, row) for i, row in enumerate(vectors.astype(np.float64).tolist())]
    return _encoder.encode(EmbeddingList(data, model, EmbeddingUsage(tokens, tokens)))
