"""Which answers were acceptable: a tenant's feedback and the outcomes the gateway sees itself.

Each answer a tier completed is kept here, by its request id, for a while (``[feedback]
answers_held``, the oldest forgotten first): the tenant, the tier that answered, and the request's
quality features (what the router's quality model learns over, router/_learning/quality.py), packed
(packed.py): ~420 bytes an answer, never the answer itself nor a label's note (those go to the
ledger's ``answer_labels``).  A label for it then reaches
the router's learner through ``learn`` (gateway/pipeline/routing_service.py queues it and folds it
beside the request path):

    feedback       POST /v1/feedback names the answer (chatcmpl-…, cmpl-… or resp_…): a score in
                   [0, 1] (good from 0.5 up) or a label; the tenant's own answers only (another's is
                   a 404, as an unknown one)
    re-ask         the same session (prompt_cache_key, X-Session-ID, safety_identifier or user) asks a
                   similar last turn (cosine of the hashed words >= :data:`REASK_SIMILARITY`) within
                   :data:`REASK_WINDOW_S`: the earlier answer was bad
    abandoned      a stream whose client left after it began and before it finished: bad
    cut short      a structured answer (response_format) that stopped at max_tokens: bad
    no such tool   a tool call to a tool the request did not offer: bad
    shadow         a reference tier asked the same in the background agreed or not (shadow.py)

One label per answer: the first one counts.  A feedback repeated with the same verdict answers as
the first did (idempotent); one with the other verdict, or feedback for an answer the gateway has
labelled already, is a 409 naming the label it has.  Labels are learned at once and kept in the
router's saved state (their counts per tenant and tier, per hour), and each is recorded beside the
answer's ledger row (gateway/accounts/quality/labels.py, by request id); the map itself is memory only.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec

import router
from gateway.accounts.quality.packed import pack, unpack
from gateway.accounts.quality.settings import FeedbackSettings
from gateway.errors import Conflict, InvalidRequest, NotFound

REASK_WINDOW_S = 120.0
REASK_SIMILARITY = 0.6
NOTE_CHARS = 1000
GOOD_LABELS = ("good", "acceptable", "thumbs_up", "correct")
BAD_LABELS = ("bad", "unacceptable", "thumbs_down", "wrong")
PREFIXES = ("chatcmpl-", "cmpl-")
Source = Literal["feedback", "re-ask", "abandoned", "cut short", "no such tool", "shadow"]
# What the learner is told: tenant, tier, the request's quality features, good?
Learn = Callable[[str, str, router.QualityKeys, bool], None]
# Where a label is recorded (gateway/accounts/quality/labels.py): the columns of ``answer_labels``.
Record = Callable[[dict[str, object]], None]


class FeedbackRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The body of ``POST /v1/feedback``: exactly one of ``score`` and ``label``."""

    id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    score: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    label: Literal[*GOOD_LABELS, *BAD_LABELS] | None = None  # type: ignore[valid-type]
    note: Annotated[str, msgspec.Meta(max_length=NOTE_CHARS)] | None = None

    @property
    def good(self) -> bool:
        if (self.score is None) == (self.label is None):
            raise InvalidRequest("give one of score (0 to 1) and label (good or bad)", param="score")
        return self.score >= 0.5 if self.score is not None else self.label in GOOD_LABELS


@dataclass(slots=True)
class Answered:
    """One answer a tier completed, as labels need it: ~420 bytes with its place in the map."""

    tenant: str
    tier: str
    keys: bytes  # its quality features, packed (packed.py)
    good: bool | None = None  # its label, once it has one
    source: Source | None = None


BUCKETS = 1 << 12  # the hashed words' buckets come first (router/_learning/difficulty.py)


def similarity(a: router.QualityKeys, b: router.QualityKeys) -> float:
    """Cosine of two requests' hashed words and word pairs (both L2-normalised already)."""
    wa = {i: x for i, x in zip(*a, strict=True) if i < BUCKETS}
    wb = {i: x for i, x in zip(*b, strict=True) if i < BUCKETS}
    dot = sum(x * wb.get(i, 0.0) for i, x in wa.items())
    norm = math.sqrt(sum(x * x for x in wa.values()) * sum(x * x for x in wb.values()))
    return dot / norm if norm else 0.0


class Outcomes:
    """Answers by request id, sessions' last turns, and the labels they get (see the module's docstring)."""

    def __init__(
        self,
        learn: Learn,
        *,
        record: Record | None = None,
        settings: FeedbackSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._learn = learn
        self._record = record
        settings = settings or FeedbackSettings()
        self._held, self._sessions_held = settings.answers_held, settings.sessions_held
        self._clock = clock
        self._answers: OrderedDict[str, Answered] = OrderedDict()
        self._aliases: OrderedDict[str, str] = OrderedDict()  # resp_… → its request id
        # (tenant, session) → its last turn: request id, when, packed features; oldest first
        self._sessions: OrderedDict[tuple[str, str], tuple[str, float, bytes]] = OrderedDict()
        self.counts: dict[tuple[str, str, str, bool], int] = {}  # (tenant, tier, source, good) → labels

    # -- the ending's side -----------------------------------------------------------------------

    def answered(
        self, request_id: str, tenant: str, tier: str, keys: router.QualityKeys, session: str | None
    ) -> None:
        """A tier completed an answer: kept for labels; a re-ask of the session's last turn labels that."""
        now = self._clock()
        packed = pack(keys)
        self._answers[request_id] = Answered(tenant, tier, packed)
        while len(self._answers) > self._held:
            self._answers.popitem(last=False)
        if session is None:
            return
        key = (tenant, session)
        last = self._sessions.pop(key, None)
        if (
            last is not None
            and now - last[1] <= REASK_WINDOW_S
            and similarity(unpack(last[2]), keys) >= REASK_SIMILARITY
        ):
            self.outcome(last[0], False, "re-ask")
        self._sessions[key] = (request_id, now, packed)
        # Turns past the re-ask window can never be re-asked: they go first, then any over the bound.
        while self._sessions and (
            len(self._sessions) > self._sessions_held
            or now - next(iter(self._sessions.values()))[1] > REASK_WINDOW_S
        ):
            self._sessions.popitem(last=False)

    def outcome(self, request_id: str, good: bool, source: Source, note: str | None = None) -> bool:
        """Label an answer (the first label counts); whether this one did."""
        answered = self._answers.get(request_id)
        if answered is None or answered.good is not None:
            return False
        answered.good, answered.source = good, source
        self._learn(answered.tenant, answered.tier, unpack(answered.keys), good)
        if self._record is not None:
            self._record(
                {
                    "request_id": request_id,
                    "tenant": answered.tenant,
                    "tier": answered.tier,
                    "good": good,
                    "source": source,
                    "note": note,
                    "labelled_at": self._clock(),
                }
            )
        key = (answered.tenant, answered.tier, source, good)
        self.counts[key] = self.counts.get(key, 0) + 1
        return True

    def alias(self, answer_id: str, request_id: str) -> None:
        """A Responses API id (``resp_…``) for the answer of ``request_id``."""
        self._aliases[answer_id] = request_id
        while len(self._aliases) > self._held:
            self._aliases.popitem(last=False)

    # -- POST /v1/feedback -------------------------------------------------------------------------

    def feedback(self, tenant: str, asked: FeedbackRequest) -> dict[str, object]:
        """The tenant's label for one of its answers; a 404 for an unknown answer or another tenant's."""
        good = asked.good
        request_id = self._aliases.get(asked.id) or _request_id(asked.id)
        answered = self._answers.get(request_id) if request_id else None
        if answered is None or answered.tenant != tenant:
            raise NotFound(f"no answer {asked.id!r} to give feedback on (or it is too old)", param="id")
        if answered.good is not None and (answered.source != "feedback" or answered.good != good):
            said = "good" if answered.good else "bad"
            raise Conflict(f"answer {asked.id!r} is labelled {said} already (by {answered.source})")
        assert request_id is not None
        self.outcome(request_id, good, "feedback", asked.note)
        return {
            "object": "feedback",
            "id": asked.id,
            "label": "good" if good else "bad",
            "tier": answered.tier,
        }

    def report(self, tenant: str | None = None) -> list[dict[str, object]]:
        """Labels per tenant, tier and source."""
        return [
            {"tenant": t, "tier": tier, "source": source, "good": good, "labels": n}
            for (t, tier, source, good), n in sorted(self.counts.items())
            if tenant is None or t == tenant
        ]


def _request_id(answer_id: str) -> str | None:
    for prefix in PREFIXES:
        if answer_id.startswith(prefix):
            return answer_id[len(prefix) :]
    return None
