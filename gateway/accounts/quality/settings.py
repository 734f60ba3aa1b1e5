"""How many answers wait for their labels (``[feedback]``; gateway/settings.py gathers it)."""

from __future__ import annotations

import msgspec


class FeedbackSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The answers a label may still name, and the sessions a re-ask is looked for in (feedback.py).

    Each answer kept costs ~420 bytes (its request id, tenant and tier, its quality features packed:
    tests/gateway/accounts/test_feedback_memory.py measures it), so the default 20,000 is ~8 MB; at
    40 answers a second that is the last ~8 minutes' answers, at 4 a second the last ~80.  A label for
    an older answer is a 404, as for an unknown one.  Raise it where labels come late and memory allows.
    """

    answers_held: int = msgspec.field(default=20_000)
    # Sessions whose last turn is kept for a re-ask; a turn older than the re-ask window (120 s) is
    # dropped anyway, so this bounds only a burst of new sessions (~500 bytes each).
    sessions_held: int = 10_000
