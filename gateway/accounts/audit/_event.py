"""What one audit row says, and how its hash is made.

A row's content is canonical JSON (keys sorted, no spaces, UTF-8) of every column but the hashes;
its hash is ``sha256(prev_hash + content)``, hex. The first row's ``prev_hash`` is 64 zeros. So a
row edited in place no longer matches its hash, and a row deleted leaves a gap in ``seq``.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
from datetime import UTC, datetime
from typing import Any

import msgspec

GENESIS = "0" * 64

PERSON = "person"  # signed in through the identity provider: its subject or email
KEY = "key"  # an API key: its id (the part after tg_), never the key
CLI = "cli"  # the command line on the gateway's machine: cli:<OS user>
SYSTEM = "system"  # the gateway itself: settings read at start or on SIGHUP
ACTOR_KINDS = (PERSON, KEY, CLI, SYSTEM)

# Field names whose values are secrets: dropped from before/after wherever they appear, at any depth.
SECRET_FIELDS = frozenset(
    {
        "key",
        "key_hash",
        "previous_hash",
        "api_key",
        "secret",
        "client_secret",
        "password",
        "token",
        "id_token",
        "access_token",
        "refresh_token",
        "authorization",
    }
)


class Actor(msgspec.Struct, frozen=True, kw_only=True):
    """Who made a change: ``id`` (a person's subject/email, a key's id, ``cli:<user>``), its kind,
    and the client address it came from (None off HTTP)."""

    id: str
    kind: str
    address: str | None = None

    @classmethod
    def of_key(cls, key_id: str, address: str | None = None) -> Actor:
        return cls(id=key_id, kind=KEY, address=address)

    @classmethod
    def of_person(cls, subject: str, address: str | None = None) -> Actor:
        return cls(id=subject, kind=PERSON, address=address)

    @classmethod
    def of_cli(cls) -> Actor:
        """The local OS user running the command (the CLI writes the database directly)."""
        try:
            user = getpass.getuser()
        except (OSError, KeyError):  # no name for this uid (a container's)
            user = str(os.getuid())
        return cls(id=f"cli:{user}", kind=CLI)

    @property
    def label(self) -> str:
        """How older records (policy history's ``changed_by``) name it."""
        return self.id if self.kind in (CLI, PERSON) else f"{self.kind}:{self.id}"


SYSTEM_ACTOR = Actor(id="tiergate", kind=SYSTEM)


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """One change or sign-in to record. ``before``/``after``: the object as JSON-able values (a
    msgspec Struct, dict, list...), None where there was none; secrets are stripped on recording."""

    actor: Actor
    action: str  # <object>.<verb>: tenant.created, key.rotated, sign_in.failed, tier.drained, ...
    object_type: str
    object_id: str
    tenant: str | None = None  # the tenant the object belongs to (a tenant admin sees its rows)
    before: Any = None
    after: Any = None


class AuditRow(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    at: str  # UTC ISO-8601 with microseconds and Z
    actor: str
    actor_kind: str
    address: str | None
    action: str
    object_type: str
    object_id: str
    tenant: str | None
    before: Any  # decoded JSON
    after: Any
    prev_hash: str
    hash: str


def now_iso(when: datetime | None = None) -> str:
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def scrub(value: Any) -> Any:
    """``value`` as plain JSON values with every secret field removed (at any depth)."""
    plain = msgspec.to_builtins(value)
    return _drop_secrets(plain)


def _drop_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_secrets(v) for k, v in value.items() if str(k).lower() not in SECRET_FIELDS}
    if isinstance(value, list):
        return [_drop_secrets(v) for v in value]
    return value


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def json_or_none(value: Any) -> str | None:
    return None if value is None else canonical(scrub(value))


def content_of(columns: dict[str, Any]) -> str:
    """The canonical content a row's hash covers: every column but ``prev_hash`` and ``hash``, with
    before/after as their stored JSON text."""
    return canonical({k: v for k, v in columns.items() if k not in ("prev_hash", "hash")})


def chain_hash(prev_hash: str, content: str) -> str:
    return hashlib.sha256((prev_hash + content).encode()).hexdigest()
