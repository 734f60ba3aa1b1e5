"""The audit trail: who changed what, when, from where, with the value before and after.

One function records: :func:`append` inside a store's own transaction (tenants, keys, policies,
prices), or :meth:`AuditTrail.record` for a change that is not a database write (a tier drained or
swapped, settings reloaded, a sign-in). Rows are append-only and hash-chained
(:meth:`AuditTrail.verify`); secrets (keys, key hashes, client secrets, tokens) are stripped
from before/after on the way in.

    from gateway.accounts.audit import Actor, AuditTrail, Event
    trail.record(Event(actor=Actor.of_person("ana@example.com", "10.0.0.7"), action="sign_in.succeeded",
                       object_type="session", object_id="ana@example.com", after={"role": "admin"}))
"""

from gateway.accounts.audit._event import (
    ACTOR_KINDS,
    CLI,
    KEY,
    PERSON,
    SECRET_FIELDS,
    SYSTEM,
    SYSTEM_ACTOR,
    Actor,
    AuditRow,
    Event,
    scrub,
)
from gateway.accounts.audit._trail import (
    MAX_PAGE,
    AuditQuery,
    AuditTrail,
    Broken,
    append,
    export_lines,
    parse_time,
)

__all__ = [
    "ACTOR_KINDS",
    "CLI",
    "KEY",
    "MAX_PAGE",
    "PERSON",
    "SECRET_FIELDS",
    "SYSTEM",
    "SYSTEM_ACTOR",
    "Actor",
    "AuditQuery",
    "AuditRow",
    "AuditTrail",
    "Broken",
    "Event",
    "append",
    "export_lines",
    "parse_time",
    "scrub",
]
