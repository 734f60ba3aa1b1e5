"""A tenant policy as an HTML form: its fields, and the posted form back to a policy.

Field names are the policy's dotted paths (``latency.total_ms``), so an error the policy's
validation reports for a path is shown next to the input of that name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.accounts import policies

MEDIA = policies.POLICY_MEDIA


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # dotted path in the policy
    label: str
    kind: str  # number | select | checkbox | json (a list, edited as JSON text)
    help: str = ""
    choices: tuple[tuple[str, str], ...] = ()  # (value, label) for selects
    step: str = "any"

    @property
    def id(self) -> str:
        return "f-" + self.name.replace(".", "-")


def fields(tiers: list[str]) -> list[tuple[str, list[Field]]]:
    """The form, in groups: (legend, fields)."""
    tier_choices = (("", "none"), *((t, t) for t in tiers))
    return [
        (
            "Routing",
            [
                Field(
                    "strategy",
                    "Strategy",
                    "select",
                    "how tiergate-auto chooses for this tenant",
                    tuple((s, s) for s in policies.strategy_names(tiers)),
                ),
                Field(
                    "preferred_tier",
                    "Preferred tier",
                    "select",
                    "taken whenever it meets the objective and the quality floor, even if dearer",
                    tier_choices,
                ),
                Field(
                    "quality_floor",
                    "Quality floor",
                    "number",
                    "0–1: the least declared quality a tier's model must have",
                    step="0.05",
                ),
                Field(
                    "weigh_difficulty",
                    "Weigh difficulty",
                    "checkbox",
                    "learned: a tier's quality must also reach each request's estimated difficulty",
                ),
                Field(
                    "acceptable_floor",
                    "Acceptable floor",
                    "number",
                    "0–1, learned: the least learned probability that a tier's answer is acceptable, "
                    "once the tenant's own labels cover the request (else the declared quality decides); "
                    "empty: 0.7",
                    step="0.05",
                ),
            ],
        ),
        (
            "Shadow comparisons",
            [
                Field(
                    "shadow.enabled",
                    "Ask a sample of answers again of a reference tier",
                    "checkbox",
                    "in the background, after the answer; billed as endpoint shadow; the verdict is a label",
                ),
                Field("shadow.rate", "Share shadowed", "number", "0–1; empty: 0.05", step="0.01"),
                Field("shadow.budget_usd", "Budget per day (USD)", "number", "empty: 1", step="0.01"),
                Field(
                    "shadow.reference",
                    "Reference tier",
                    "select",
                    "none: the tier of highest declared quality",
                    tier_choices,
                ),
                Field(
                    "shadow.threshold",
                    "Agreement threshold",
                    "number",
                    "(0, 1]: least similarity of two prose answers; empty: 0.6",
                    step="0.05",
                ),
            ],
        ),
        (
            "Latency objective",
            [
                Field("latency.ttft_ms", "Time to first token (ms)", "number", "empty: no bound"),
                Field("latency.total_ms", "Total time (ms)", "number", "empty: no bound"),
                Field("latency.percentile", "At percentile", "number", "50–99.9", step="0.1"),
            ],
        ),
        (
            "Budget",
            [
                Field("budget.amount_usd", "Amount (USD)", "number", "per period; 0: no budget", step="0.01"),
                Field("budget.period", "Period", "select", "UTC", tuple((p, p) for p in policies.PERIODS)),
                Field(
                    "budget.on_exhausted",
                    "Once spent",
                    "select",
                    "",
                    (("cheapest", "route to the cheapest tier"), ("refuse", "refuse (429)")),
                ),
                Field(
                    "tag_budgets",
                    "Budgets per cost tag",
                    "lines",
                    "one a line: tag amount-USD [day|week|month], e.g. team=search 10 month; "
                    "once spent, its requests are treated as above",
                ),
            ],
        ),
        (
            "Modality rules",
            [
                Field(
                    f"modality_rules.{m}",
                    f"Requests with {m}",
                    "select",
                    "must go to this tier",
                    tier_choices,
                )
                for m in MEDIA
            ],
        ),
        (
            "Residency rules",
            [
                Field(
                    "residency",
                    "Rules (JSON)",
                    "json",
                    'e.g. [{"detector": "iban", "action": "keep_local"}, {"detector": "email", '
                    '"action": "redact"}]; detectors: email, phone, iban, card, national_id, secret, '
                    'pattern (with "pattern"); actions: keep_local, redact, refuse',
                )
            ],
        ),
        (
            "Cache and degradation",
            [
                Field("cache", "Answer repeats from the result cache", "checkbox"),
                Field(
                    "semantic_cache.enabled",
                    "Answer paraphrases from the semantic cache",
                    "checkbox",
                    "the last user turn embeds close to a stored one's, all else equal; 2.6-4.7 % of "
                    "unseen near misses (capital of France / of Germany) got the stored answer in tests "
                    "(docs/cache.md)",
                ),
                Field(
                    "semantic_cache.threshold",
                    "Semantic similarity threshold",
                    "number",
                    "(0, 1]: the least cosine similarity of the two turns; empty: 0.85",
                    step="0.01",
                ),
                Field(
                    "semantic_cache.allow_tools",
                    "Semantic cache: also requests with tool results",
                    "checkbox",
                ),
                Field(
                    "semantic_cache.allow_sampling",
                    "Semantic cache: also sampled requests",
                    "checkbox",
                    "temperature above 0 without a seed",
                ),
                Field(
                    "degrade",
                    "When a medium's path is broken on every tier",
                    "select",
                    "",
                    (
                        ("default", "the gateway's setting"),
                        ("serve", "serve it text-only"),
                        ("fail", "fail (503)"),
                    ),
                ),
            ],
        ),
    ]


def flatten(policy: policies.TenantPolicy) -> dict[str, str]:
    """The policy as the form's values: dotted path → text (a strategy by its current name:
    ``always:edge`` for a policy stored as ``always-edge``)."""
    plain = msgspec.to_builtins(policy)
    plain["strategy"] = policies.canonical_strategy(policy.strategy)
    out: dict[str, str] = {
        "tag_budgets": "\n".join(
            f"{b['tag']} {_text(b['amount_usd'])} {b['period']}" for b in plain.pop("tag_budgets")
        )
    }

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, list):
            out[prefix[:-1]] = json.dumps(value) if value else ""
        elif isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}{key}.", inner)
        else:
            out[prefix[:-1]] = _text(value)

    walk("", plain)
    return out


def _text(value: Any) -> str:
    if value is None or value is False:
        return ""
    if value is True:
        return "on"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse(form: dict[str, str], tiers: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The posted form as the policy's JSON shape, and errors by field for what is not a number."""
    errors: dict[str, str] = {}
    body: dict[str, Any] = {
        "latency": {},
        "budget": {},
        "modality_rules": {},
        "semantic_cache": {},
        "shadow": {},
    }
    for _, group in fields(tiers):
        for field in group:
            text = form.get(field.name, "").strip()
            if field.kind == "lines":
                value: Any = _tag_budgets(text, errors)
            elif field.kind == "checkbox":
                value = bool(text)
            elif field.kind == "json":
                try:
                    value = json.loads(text) if text else []
                except ValueError as exc:
                    errors[field.name] = f"not JSON: {exc}"
                    continue
            elif field.kind == "number":
                if not text:
                    value = None
                else:
                    try:
                        value = float(text)
                    except ValueError:
                        errors[field.name] = "a number"
                        continue
            else:
                value = text or None
            head, _, tail = field.name.partition(".")
            if head == "modality_rules":
                if value is not None:
                    body["modality_rules"][tail] = value
            elif tail:
                if value is not None or head == "latency":  # an empty latency bound means none
                    body[head][tail] = value
            elif value is not None:
                body[head] = value
    return body, errors


def _tag_budgets(text: str, errors: dict[str, str]) -> list[dict[str, Any]]:
    """``team=search 10 month`` lines as the policy's tag budgets (the policy checks the tags, whose
    values may hold spaces: the amount and the period are the last words)."""
    budgets = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        words = line.strip().rsplit(None, 2)
        period = words[-1] if len(words) == 3 and words[-1] in policies.PERIODS else None
        parts = words if period else line.strip().rsplit(None, 1)
        try:
            if len(parts) < 2:
                raise ValueError
            amount = float(parts[1])
        except ValueError:
            errors["tag_budgets"] = f"line {number}: write tag amount [period], e.g. team=search 10 month"
            continue
        budgets.append({"tag": parts[0], "amount_usd": amount, "period": period or "month"})
    return budgets


def to_policy(body: dict[str, Any]) -> policies.TenantPolicy:
    """Decode with the policy's own validation (raises :class:`~gateway.accounts.policies.PolicyInvalid`)."""
    try:
        return policies.decode_policy(json.dumps(body))
    except policies.PolicyInvalid as exc:
        if exc.field.startswith("tag_budgets."):  # one line of the tag budgets' box
            raise policies.PolicyInvalid("tag_budgets", exc.message) from exc
        raise


_SWITCHES = (
    "cache",
    "weigh_difficulty",
    "semantic_cache.enabled",
    "semantic_cache.allow_tools",
    "semantic_cache.allow_sampling",
    "shadow.enabled",
)


def changes(before: policies.TenantPolicy | None, after: policies.TenantPolicy) -> list[str]:
    """What a version changed, field by field (``latency.total_ms: 60000.0 → 800.0``)."""
    old = flatten(before) if before is not None else {}
    new = flatten(after)
    out = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, ""), new.get(name, "")
        if a != b:
            empty = "off" if name in _SWITCHES else "–"
            out.append(f"{name}: {a or empty} → {b or empty}")
    return out or ["no change"]
