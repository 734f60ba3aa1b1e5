"""OpenAI's legacy completions request, decoded strictly, and its one translation to the chat request
the pipeline's stages take: each prompt becomes one user turn sent to the model as it is (the
pipeline's raw-prompt mode: no chat template), with the sampling fields passed on unchanged.

What no tier here can do is a 400 naming the parameter: ``suffix`` (SmolLM2 has no fill-in-the-middle),
``best_of`` other than ``n``, token-array prompts, and ``echo`` with ``logprobs`` (the prompt's own
tokens' logprobs, which no tier returns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire.chat import (
    MAX_CHOICES,
    Bias,
    ChatCompletionRequest,
    Message,
    ModelName,
    Penalty,
    Probability,
    ShortText,
    StreamOptions,
)
from gateway.wire.decoding import decode_body

MAX_PROMPTS = 16  # prompts of one request; each is a pipeline run of its own
MAX_LOGPROBS = 5  # OpenAI's bound for the legacy endpoint
DEFAULT_MAX_TOKENS = 16  # OpenAI's default here (Chat Completions has none)


class CompletionRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    model: ModelName
    # A string, or a list of them; token arrays are refused after decoding (with a reason).
    prompt: str | Annotated[list[Any], msgspec.Meta(min_length=1, max_length=MAX_PROMPTS)]
    suffix: str | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = DEFAULT_MAX_TOKENS
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Probability | None = None
    n: Annotated[int, msgspec.Meta(ge=1, le=MAX_CHOICES)] | None = 1
    best_of: Annotated[int, msgspec.Meta(ge=1, le=MAX_CHOICES)] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    logprobs: Annotated[int, msgspec.Meta(ge=0, le=MAX_LOGPROBS)] | None = None
    echo: bool | None = False
    stop: (
        Annotated[str, msgspec.Meta(max_length=256)]
        | Annotated[list[ShortText], msgspec.Meta(max_length=4)]
        | None
    ) = None
    seed: Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: Annotated[dict[str, Bias], msgspec.Meta(max_length=1024)] | None = None
    user: ShortText | None = None  # accepted as OpenAI's clients send it; changes nothing here


@dataclass(frozen=True, slots=True)
class Completions:
    """A validated request: one chat request per prompt (``requests[i]`` for ``prompts[i]``), and what
    only the framing reads."""

    prompts: list[str]
    requests: list[ChatCompletionRequest]
    n: int
    echo: bool
    stream: bool
    include_usage: bool


_decoder = msgspec.json.Decoder(CompletionRequest)


def parse_completions(body: bytes) -> Completions:
    """Decode, validate and translate a legacy completions body; a 400 naming what is wrong."""
    request = decode_body(_decoder, body, "completions request")
    prompts = _prompts(request.prompt)
    _refuse_what_no_tier_does(request)
    n = request.n or 1
    requests = [_chat_request(request, prompt, n) for prompt in prompts]
    return Completions(
        prompts,
        requests,
        n,
        bool(request.echo),
        bool(request.stream),
        request.stream_options is not None and request.stream_options.include_usage,
    )


def _prompts(prompt: str | list[Any]) -> list[str]:
    listed = [prompt] if isinstance(prompt, str) else prompt
    for i, item in enumerate(listed):
        where = "prompt" if isinstance(prompt, str) else f"prompt[{i}]"
        if isinstance(item, int | list):
            raise InvalidRequest(
                "token-array prompts are not supported: send the prompt as text (a string or a list "
                "of strings)",
                param="prompt",
                code="unsupported_parameter",
            )
        if not isinstance(item, str):
            raise InvalidRequest(f"invalid request: {where} must be a string", param=where)
        if not item:
            raise InvalidRequest(f"{where} is empty: give the model some text to continue", param=where)
    return listed


def _refuse_what_no_tier_does(request: CompletionRequest) -> None:
    if request.suffix:
        raise InvalidRequest(
            "suffix is not supported: no tier's model can fill in the middle (SmolLM2 has no "
            "fill-in-the-middle tokens)",
            param="suffix",
            code="unsupported_parameter",
        )
    if request.best_of is not None and request.best_of != (request.n or 1):
        raise InvalidRequest(
            "best_of other than n is not supported: every sampled answer is returned (set best_of to n "
            "or leave it out)",
            param="best_of",
            code="unsupported_parameter",
        )
    if request.echo and request.logprobs is not None:
        raise InvalidRequest(
            "echo with logprobs is not supported: it needs the logprobs of the prompt's own tokens, "
            "which no tier here returns (ask for either one alone)",
            param="logprobs",
            code="unsupported_parameter",
        )
    if request.stream_options is not None and not request.stream:
        raise InvalidRequest("stream_options is only allowed when stream is true", param="stream_options")
    for token in request.logit_bias or ():
        if not token.isdigit() or len(token) > 9:
            raise InvalidRequest(
                f"logit_bias keys are token ids; {token[:20]!r} is not one", param="logit_bias"
            )


def _chat_request(request: CompletionRequest, prompt: str, n: int) -> ChatCompletionRequest:
    """The chat request for one prompt: its one user turn is the prompt, which the pipeline's raw
    mode sends to the model as it is."""
    return ChatCompletionRequest(
        model=request.model,
        messages=[Message(role="user", content=prompt)],
        stream=bool(request.stream),
        stream_options=request.stream_options,
        max_tokens=request.max_tokens or DEFAULT_MAX_TOKENS,
        temperature=request.temperature,
        top_p=request.top_p,
        n=n,
        stop=request.stop,
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        logit_bias=request.logit_bias,
        logprobs=True if request.logprobs is not None else None,
        top_logprobs=request.logprobs,
        user=request.user,
    )
