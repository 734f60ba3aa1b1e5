"""Labels counted per (tenant, tier) and per hour: for operators (the admin API and page), and for the
quality model's bounds (how many of a tenant's labels its shared prior has learned from)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HOUR = 3600.0
SERIES_HOURS = 48  # per (tenant, tier): labels and good ones per hour, this many hours kept


@dataclass(slots=True)
class LabelTally:
    """Labels of one (tenant, tier), per hour."""

    labels: int = 0
    good: int = 0
    shared: int = 0  # of its labels, those the shared prior learned from (at most ``shared_labels``)
    hours: OrderedDict[int, list[int]] | None = None  # hour → [labels, good]

    def add(self, good: bool, at: float) -> None:
        self.labels += 1
        self.good += int(good)
        hours = self.hours if self.hours is not None else OrderedDict()
        self.hours = hours
        row = hours.setdefault(int(at // HOUR), [0, 0])
        row[0] += 1
        row[1] += int(good)
        while len(hours) > SERIES_HOURS:
            hours.popitem(last=False)


Tallies = dict[tuple[str, str], LabelTally]


def report(tallies: Tallies, declared: Mapping[str, float], tenant: str | None) -> list[dict[str, Any]]:
    """Per (tenant, tier): labels, the share good, how many the shared prior learned from, per hour."""
    out = []
    for (name, tier), tally in sorted(tallies.items()):
        if tenant is not None and name != tenant:
            continue
        hours = tally.hours or OrderedDict()
        out.append(
            {
                "tenant": name,
                "tier": tier,
                "labels": tally.labels,
                "good": tally.good,
                "shared": tally.shared,
                "acceptable": round(tally.good / tally.labels, 4) if tally.labels else None,
                "declared": declared.get(tier),
                "hours": [
                    {"hour_start": h * HOUR, "labels": n, "good": k, "acceptable": round(k / n, 4)}
                    for h, (n, k) in hours.items()
                ],
            }
        )
    return out


def dump(tallies: Tallies) -> list[list[Any]]:
    return [
        [tenant, tier, t.labels, t.good, [[h, *row] for h, row in (t.hours or {}).items()], t.shared]
        for (tenant, tier), t in tallies.items()
    ]


def load(saved: Sequence[Sequence[Any]], fresh: bool) -> Tallies:
    """The tallies :func:`dump` wrote; ``fresh``: the weights were not loaded with them, so nothing
    of theirs is in the shared prior (a file saved before the prior was bounded)."""
    out: Tallies = {}
    for tenant, tier, labels, good, hours, *shared in saved:
        rows = OrderedDict((int(h), [int(n), int(k)]) for h, n, k in hours)
        given = 0 if fresh or not shared else int(shared[0])
        out[(tenant, tier)] = LabelTally(int(labels), int(good), given, rows)
    return out
