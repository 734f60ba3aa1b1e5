"""The price table: versioned in the database, charged per row in integer nano-USD.

The configured prices (``pricing.prices``) are compared with the newest stored version of
each (tier, model) at start; a changed price is stored as a new version, and recorded in the
audit trail (by ``system``: it came from the settings file) in the same transaction.  A row records
the id of the version it was charged, so later changes never rewrite history.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgspec
from sqlalchemy import Engine, select

from gateway.accounts.audit import SYSTEM_ACTOR, Actor, Event, append
from gateway.accounts.storage import prices


class Price(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a tier (and optionally one model of it; "*" is any) charges, in USD."""

    tier: str
    model: str = "*"
    prompt_per_1k: float = 0.0
    completion_per_1k: float = 0.0
    per_image: float = 0.0
    per_media_second: float = 0.0
    per_gpu_second: float = 0.0
    # Prompt tokens read from a provider's prompt cache (OpenAI's cached_tokens, Anthropic's
    # cache_read_input_tokens) and written to it (Anthropic's cache_creation_input_tokens); unset:
    # they cost prompt_per_1k, like the rest of the prompt.
    cached_prompt_per_1k: float | None = None
    cache_write_per_1k: float | None = None


DEFAULT_PRICES = (
    Price(tier="edge", prompt_per_1k=0.00002, completion_per_1k=0.00004),
    Price(tier="cloud", prompt_per_1k=0.0005, completion_per_1k=0.0015, per_image=0.001),
    *(Price(tier=t, prompt_per_1k=0.00001) for t in ("embedding", "embedding-vllm")),  # /v1/embeddings
    # /v1/audio/*, by the second of audio (OpenAI's whisper-1: $0.006 a minute)
    Price(tier="speech", per_media_second=0.0001),
)


class PricingSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # A changed price becomes a new version; rows keep the version they were charged.
    prices: list[Price] = msgspec.field(default_factory=lambda: list(DEFAULT_PRICES))
    # The reports' counterfactual: what the same requests would have cost on this tier.
    counterfactual_tier: str = "cloud"


NANO = 1_000_000_000
_FIELDS = (
    "prompt_per_1k",
    "completion_per_1k",
    "per_image",
    "per_media_second",
    "per_gpu_second",
    "cached_prompt_per_1k",
    "cache_write_per_1k",
)


# Of a prompt's tokens: (read from a prompt cache, written to it).
Cache = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Charge:
    price_id: int | None
    cost_nusd: int


@dataclass(frozen=True, slots=True)
class _Version:
    id: int
    price: Price

    def cost(
        self, prompt: int, completion: int, images: int, media_s: float, gpu_s: float, cache: Cache = (0, 0)
    ) -> int:
        """In nano-USD; ``cache``: of ``prompt``, the tokens read from and written to a prompt cache."""
        p = self.price
        read, written = cache
        read_price = p.prompt_per_1k if p.cached_prompt_per_1k is None else p.cached_prompt_per_1k
        write_price = p.prompt_per_1k if p.cache_write_per_1k is None else p.cache_write_per_1k
        usd = (
            (prompt - read - written) * p.prompt_per_1k / 1000
            + read * read_price / 1000
            + written * write_price / 1000
            + completion * p.completion_per_1k / 1000
            + images * p.per_image
            + media_s * p.per_media_second
            + gpu_s * p.per_gpu_second
        )
        return round(usd * NANO)


class PriceBook:
    def __init__(self, versions: dict[tuple[str, str], _Version], counterfactual_tier: str) -> None:
        self._versions = versions
        self.counterfactual_tier = counterfactual_tier

    @classmethod
    def sync(
        cls,
        engine: Engine,
        configured: list[Price],
        counterfactual_tier: str,
        actor: Actor = SYSTEM_ACTOR,
    ) -> PriceBook:
        """Store configured prices that differ from their newest version; load the current ones."""
        with engine.begin() as conn:
            rows = conn.execute(select(prices).order_by(prices.c.effective_from, prices.c.id)).all()
            newest = {(r.tier, r.model): r for r in rows}
            now = time.time()
            for price in configured:
                old = newest.get((price.tier, price.model))
                if old is None or any(getattr(old, f) != getattr(price, f) for f in _FIELDS):
                    values = {f: getattr(price, f) for f in _FIELDS}
                    values.update(tier=price.tier, model=price.model, effective_from=now)
                    conn.execute(prices.insert().values(**values))
                    before = None if old is None else {f: getattr(old, f) for f in _FIELDS}
                    append(
                        conn,
                        Event(
                            actor=actor,
                            action="price.set",
                            object_type="price",
                            object_id=f"{price.tier}/{price.model}",
                            before=before,
                            after={f: getattr(price, f) for f in _FIELDS},
                        ),
                    )
            rows = conn.execute(select(prices).order_by(prices.c.effective_from, prices.c.id)).all()
        versions = {
            (r.tier, r.model): _Version(
                r.id, Price(tier=r.tier, model=r.model, **{f: getattr(r, f) for f in _FIELDS})
            )
            for r in rows
        }
        return cls(versions, counterfactual_tier)

    def _find(self, tier: str, model: str) -> _Version | None:
        return self._versions.get((tier, model)) or self._versions.get((tier, "*"))

    def charge(
        self,
        tier: str,
        model: str,
        prompt: int,
        completion: int,
        images: int = 0,
        media_s: float = 0.0,
        busy_s: float = 0.0,
        cache: Cache = (0, 0),
    ) -> Charge:
        """The price of one answer: tokens (``cache``: of the prompt's, those read from and written to
        a prompt cache), images, seconds of audio and video, and the seconds the tier was busy with it
        (charged at ``per_gpu_second``)."""
        version = self._find(tier, model)
        if version is None:
            return Charge(None, 0)
        return Charge(version.id, version.cost(prompt, completion, images, media_s, busy_s, cache))

    def counterfactual(
        self, prompt: int, completion: int, images: int = 0, media_s: float = 0.0, busy_s: float = 0.0
    ) -> int:
        """What the same usage would have cost on the counterfactual (all-cloud) tier."""
        version = self._find(self.counterfactual_tier, "*")
        return 0 if version is None else version.cost(prompt, completion, images, media_s, busy_s)
