"""A hosted model provider's model as a tier: one account, one model, one protocol (its
:class:`~tiers.cloud.provider._dialect.Dialect`), over one kept HTTPS client.

Before the answer begins, a refused connection, a timeout, a 429 or a 5xx raise what lets the gateway
try the next tier of the plan (:class:`~tiers.TierUnavailable`, :class:`~tiers.TierTimeout`,
:class:`~tiers.TierOverloaded`); a 400 is the client's (:class:`~tiers.TierRejected`, the tier stays
healthy); a refused key (:class:`~tiers.KeyRefused`) takes the tier down for ``key_retry_s``.  After
the answer began, any failure is a :class:`~tiers.TierFailed`: the gateway ends the answer with an
error and bills what was generated.  The rate-limit headroom each answer's headers tell is kept: a tier
with none left reports itself down until the provider said it refills, so the router sends nothing there
to meet a 429."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from urllib.parse import urlsplit

import httpx
import msgspec

from tiers._errors import KeyRefused, TierFailed, TierOverloaded, TierTimeout, TierUnavailable
from tiers._events import ChoiceDone, Event, Finished, Started
from tiers._types import Capabilities, Generation, Health, MediaLimits, Modality, TierState
from tiers.cloud._checks import OutputCheck
from tiers.cloud.provider._config import ProviderConfig
from tiers.cloud.provider._dialect import Dialect, Headroom
from tiers.cloud.provider._dialects import dialect_for
from tiers.cloud.provider._keys import KeyMissing, read_key
from tiers.cloud.provider._sse import sse_events
from tiers.cloud.provider._transport import client_for

_DRAIN_S = 1.0  # the most a finished stream's rest is read for, to keep its connection


class ProviderTier:
    def __init__(self, name: str, config: ProviderConfig, environ: Mapping[str, str] | None = None) -> None:
        self.name = name
        self._config = config
        self._environ = environ
        self._instance = urlsplit(config.base_url).hostname or config.base_url
        self._key_set = False
        self._down_why = ""  # why the tier cannot serve (no key, a refused key)
        self._down_until = 0.0  # monotonic; 0: until the key is there
        self._dialect: Dialect = self._load_key()
        abilities = self._dialect.abilities
        if config.abilities:
            abilities = abilities & frozenset(config.abilities)
        self._capabilities = Capabilities(
            modalities=frozenset(config.modalities) | {Modality.TEXT},
            max_context_tokens=config.context_tokens,
            model=config.model,
            limits=MediaLimits(),
            quality=config.quality,
            abilities=abilities,
        )
        self._client: httpx.AsyncClient | None = None
        self._in_flight = 0
        self._headroom: Headroom | None = None
        self._headroom_until = 0.0  # monotonic: when an exhausted headroom refills
        self._retry_at = 0.0  # monotonic: a 429's retry-after, not called before

    def _load_key(self) -> Dialect:
        """The dialect with the key read now; without a key the tier is down, saying why."""
        try:
            key = read_key(self._config, self._environ)
        except KeyMissing as exc:
            self._key_set, self._down_why, self._down_until = False, str(exc), 0.0
            return dialect_for(self.name, self._config, "")
        self._key_set = bool(key)
        self._down_why, self._down_until = "", 0.0
        return dialect_for(self.name, self._config, key)

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def key_set(self) -> bool:
        return self._key_set

    def _health(self, now: float) -> tuple[Health, str]:
        if self._down_why and self._down_until and now >= self._down_until:
            self._dialect = self._load_key()  # a refused key's wait is over: read it again, try once more
        if self._down_why:
            return Health.DOWN, self._down_why
        if (
            self._headroom is not None
            and self._headroom.exhausted(self._in_flight)
            and now < self._headroom_until
        ):
            return Health.DOWN, f"rate limit used up; refills in {self._headroom_until - now:.0f} s"
        if now < self._retry_at:
            return Health.DOWN, f"rate limited by the provider; retry after {self._retry_at - now:.0f} s"
        return Health.READY, ""

    def state(self) -> TierState:
        health, detail = self._health(time.monotonic())
        if not self._config.enabled:
            health, detail = Health.DISABLED, ""
        account: dict[str, object] = {"protocol": self._config.protocol, "key_set": self._key_set}
        if self._headroom is not None:
            account["headroom"] = {
                k: v for k, v in dataclasses.asdict(self._headroom).items() if v is not None
            }
        return TierState(self.name, health, in_flight=self._in_flight, detail=detail, provider=account)

    async def start(self) -> None:
        if self._client is not None:
            return
        try:
            self._client = client_for(self._config)
        except (OSError, ssl.SSLError) as exc:  # the gateway starts; this tier says why it cannot serve
            self._down_why, self._down_until = f"cannot use ca_file {self._config.ca_file}: {exc}", 0.0

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        return self._generate(gen)

    def _note(self, headers: httpx.Headers) -> None:
        headroom = self._dialect.headroom(headers)
        if headroom is not None:
            self._headroom = headroom
            self._headroom_until = time.monotonic() + (headroom.reset_s or 1.0)

    async def _generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        health, detail = self._health(time.monotonic())
        if health is not Health.READY:
            raise TierUnavailable(self.name, detail)
        if self._client is None:
            raise TierUnavailable(self.name, "not started")
        dialect = self._dialect
        outgoing = dialect.request(gen)
        headers = {**outgoing.headers, "content-type": "application/json"}
        deadline = time.monotonic() + self._config.timeouts.total_s
        begun = ended = False
        chunks: AsyncIterator[bytes] | None = None
        self._in_flight += 1
        try:
            request = self._client.build_request("POST", outgoing.url, headers=headers, content=outgoing.body)
            async with asyncio.timeout(self._config.timeouts.total_s):  # no yield inside: safe here
                response = await self._client.send(request, stream=True)
            try:
                self._note(response.headers)
                if response.status_code >= 300:
                    error = dialect.failure(response.status_code, response.headers, await response.aread())
                    if isinstance(error, TierOverloaded):  # honour its retry-after: not called until then
                        self._retry_at = time.monotonic() + error.retry_after_s
                    if isinstance(error, KeyRefused):
                        self._down_why, self._down_until = (
                            error.message,
                            time.monotonic() + self._config.key_retry_s,
                        )
                    raise error
                check, reasons = OutputCheck(gen, self.name), dict[int, str]()
                if not gen.stream:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        body = await response.aread()
                    events = dialect.answer(body, gen)
                    for event in events:  # refused before anything is sent: the plan may move on
                        _checked(check, reasons, event)
                    begun = True
                    yield Started(self._instance, self._config.model)
                    for event in events:
                        yield event
                    return
                chunks = response.aiter_bytes()
                async for event in dialect.stream(sse_events(chunks), gen):
                    ended = ended or isinstance(event, Finished)
                    if not begun:
                        begun = True
                        yield Started(self._instance, self._config.model)
                    _checked(check, reasons, event)
                    yield event
                    if time.monotonic() > deadline:
                        raise TierFailed(
                            self.name, f"the answer ran past total_s ({self._config.timeouts.total_s} s)"
                        )
            finally:
                if ended and chunks is not None:  # the consumer may stop at Finished: drained here
                    await _drained(chunks)
                await response.aclose()
        except (httpx.TimeoutException, TimeoutError) as exc:
            if begun:
                raise TierFailed(
                    self.name, f"the provider stalled mid-answer ({type(exc).__name__})"
                ) from None
            raise TierTimeout(
                self.name, f"{self._instance} did not answer in time ({type(exc).__name__})"
            ) from None
        except httpx.HTTPError as exc:
            if begun:
                raise TierFailed(
                    self.name, f"the connection failed mid-answer ({type(exc).__name__})"
                ) from None
            raise TierUnavailable(
                self.name, f"cannot reach {self._instance} ({type(exc).__name__})"
            ) from None
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, KeyError) as exc:
            raise TierFailed(self.name, f"the provider's answer is not its protocol's: {exc}") from None
        finally:
            self._in_flight -= 1


async def _drained(chunks: AsyncIterator[bytes]) -> None:
    """Read what is left of a stream's body after its last event (OpenAI's ``[DONE]``: the end of the
    chunked body), briefly: httpx puts an HTTP/1.1 connection back in its pool only when its body was
    read to the end, and closes it otherwise, so every stream would pay a new TLS handshake."""
    with contextlib.suppress(httpx.HTTPError, TimeoutError):
        async with asyncio.timeout(_DRAIN_S):
            async for _ in chunks:
                pass


def _checked(check: OutputCheck, reasons: dict[int, str], event: Event) -> None:
    """Feed ``event`` to the request's output check; at the answer's end, raise
    :class:`~tiers.OutputRefused` if a tool call or the content breaks what the request demanded (the
    same check as the vLLM pool's: a tool not offered, arguments or content against their schema)."""
    if isinstance(event, ChoiceDone):
        reasons[event.choice] = event.reason
    elif isinstance(event, Finished):
        check.finished({0: event.reason, **reasons})
    else:
        check.piece(event)
