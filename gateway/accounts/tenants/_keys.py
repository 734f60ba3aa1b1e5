"""API keys: ``tg_<id>_<secret>``. Only a SHA-256 of the whole key is stored; checks compare
hashes with :func:`hmac.compare_digest`, so the time taken says nothing about the key."""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "tg_"
_ID_BYTES = 6  # 12 hex characters: public, names the key in lists and in the ledger
_SECRET_BYTES = 24
# Compared against when the key id is unknown, so that a miss costs the same as a mismatch.
_NO_SUCH_KEY_HASH = "0" * 64


def new_key(key_id: str | None = None) -> tuple[str, str, str]:
    """A fresh key: (key id, the whole key to hand out once, its hash to store); ``key_id``: a new
    secret for that id (a rotation)."""
    key_id = key_id or secrets.token_hex(_ID_BYTES)
    key = f"{PREFIX}{key_id}_{secrets.token_urlsafe(_SECRET_BYTES)}"
    return key_id, key, hash_key(key)


def hash_key(key: str) -> str:
    # Keys carry 192 random bits: a plain hash is enough (no password stretching needed).
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key: str) -> str | None:
    """The id part of a well-formed key, else None."""
    if not key.startswith(PREFIX):
        return None
    key_id, sep, secret = key[len(PREFIX) :].partition("_")
    if not sep or len(key_id) != 2 * _ID_BYTES or not secret:
        return None
    return key_id


def matches(key: str, stored_hash: str | None) -> bool:
    """Whether ``key`` hashes to ``stored_hash``, compared in constant time."""
    return hmac.compare_digest(hash_key(key), stored_hash or _NO_SUCH_KEY_HASH)
