"""This gateway as an OpenID Connect relying party: the authorization code flow with PKCE (S256).

``start`` makes the state, the nonce and the PKCE verifier of one sign-in and the provider's
authorization URL; ``finish`` takes the code back (once: a state is used up), exchanges it at the
token endpoint with the verifier, and checks the ID token: its signature with the provider's JWKS
(fetched again when the token names a key id it does not hold, so a key rotated at the provider is
picked up while the gateway runs), only asymmetric algorithms the provider announces (never
``none``, never an HMAC keyed by something public), then issuer, audience, ``azp``, expiry, issue
time and nonce (authlib's ``CodeIDToken``).

Each sign-in is also bound to the browser that started it: ``start`` hands back a random token for
a short-lived cookie, and ``finish`` refuses a state whose cookie does not match (a code injected
into someone else's browser signs nobody in).

Nothing here logs or returns a token or the client secret; :class:`SignInFailed` carries a reason
that is safe to show and to record.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from authlib.common.security import generate_token
from authlib.common.urls import add_params_to_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

from gateway.accounts.people._settings import OidcSettings

# Signature algorithms an ID token may use: public-key ones only.
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
PENDING_S = 600.0  # a sign-in started and not finished within this is forgotten
MAX_PENDING = 10_000
LEEWAY_S = 60  # clock skew allowed on exp, iat


class SignInFailed(Exception):
    """A sign-in refused; ``reason`` names why without any token or secret in it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Pending:
    verifier: str
    nonce: str
    next_path: str
    browser: str  # SHA-256 of the binding cookie's value
    started: float


@dataclass(frozen=True, slots=True)
class Verified:
    """A signed-in person: the ID token's claims, the token itself (for the provider's sign-out,
    kept in the server-side session only) and when it expires (epoch seconds)."""

    claims: dict[str, Any]
    id_token: str
    expires_at: float
    next_path: str

    @property
    def person(self) -> str:
        """Who: the email when the provider gives one, else the subject."""
        email = self.claims.get("email")
        return email if isinstance(email, str) and email else str(self.claims["sub"])


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class RelyingParty:
    def __init__(self, settings: OidcSettings, timeout_s: float = 10.0) -> None:
        self.settings = settings
        self._timeout_s = timeout_s
        self._metadata: dict[str, Any] | None = None
        self._jwks: KeySet | None = None
        self._pending: dict[str, Pending] = {}
        self._lock = asyncio.Lock()

    async def _get_json(self, url: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=self._timeout_s) as client:
            reply = await client.get(url, headers={"accept": "application/json"})
        reply.raise_for_status()
        found = reply.json()
        if not isinstance(found, dict):
            raise ValueError("not a JSON object")
        return found

    async def metadata(self) -> dict[str, Any]:
        """The provider's discovery document (read once, then kept)."""
        if self._metadata is None:
            url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                found = await self._get_json(url)
            except (httpx.HTTPError, ValueError) as exc:
                raise SignInFailed(
                    f"the identity provider's discovery document could not be read ({exc})"
                ) from exc
            # OpenID Connect Discovery 4.3: the document names the issuer it was asked about.
            if found.get("issuer") != self.settings.issuer:
                raise SignInFailed("the identity provider's discovery document names another issuer")
            for needed in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(found.get(needed), str):
                    raise SignInFailed(f"the identity provider's discovery document has no {needed}")
            self._metadata = found
        return self._metadata

    async def _keys(self, refresh: bool) -> KeySet:
        async with self._lock:
            if self._jwks is None or refresh:
                uri = (await self.metadata())["jwks_uri"]
                try:
                    self._jwks = KeySet.import_key_set(await self._get_json(uri))  # type: ignore[arg-type]
                except (httpx.HTTPError, ValueError, JoseError) as exc:
                    raise SignInFailed(f"the identity provider's keys could not be read ({exc})") from exc
            return self._jwks

    def _forget_stale(self, now: float) -> None:
        for state in [s for s, p in self._pending.items() if now - p.started > PENDING_S]:
            del self._pending[state]
        while len(self._pending) >= MAX_PENDING:  # still full: drop the oldest
            del self._pending[next(iter(self._pending))]

    async def start(self, redirect_uri: str, next_path: str) -> tuple[str, str]:
        """(the provider's authorization URL to send the browser to, the binding cookie's value)."""
        metadata = await self.metadata()
        now = time.monotonic()
        self._forget_stale(now)
        state, nonce, verifier = generate_token(32), generate_token(32), generate_token(64)
        browser = secrets.token_urlsafe(32)
        self._pending[state] = Pending(verifier, nonce, next_path, _digest(browser), now)
        url = add_params_to_uri(
            metadata["authorization_endpoint"],
            [
                ("response_type", "code"),
                ("client_id", self.settings.client_id),
                ("redirect_uri", redirect_uri),
                ("scope", " ".join(self.settings.scopes)),
                ("state", state),
                ("nonce", nonce),
                ("code_challenge", create_s256_code_challenge(verifier)),
                ("code_challenge_method", "S256"),
            ],
        )
        return url, browser

    def _take(self, state: str, browser: str | None) -> Pending:
        pending = self._pending.pop(state, None) if state else None
        if pending is None or time.monotonic() - pending.started > PENDING_S:
            raise SignInFailed("this sign-in was not started here or took too long: start again")
        if not browser or not hmac.compare_digest(_digest(browser), pending.browser):
            raise SignInFailed("this sign-in was started in another browser: start again")
        return pending

    async def finish(self, redirect_uri: str, state: str, code: str, browser: str | None) -> Verified:
        """The person behind ``code``, once the state, the exchange and the ID token check out."""
        pending = self._take(state, browser)
        if not code:
            raise SignInFailed("the identity provider sent no authorization code")
        metadata = await self.metadata()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": pending.verifier,
            "client_id": self.settings.client_id,
        }
        secret = self.settings.client_secret()
        # client_secret_basic (RFC 6749 2.3.1: both parts form-encoded); a public client sends none.
        auth: tuple[str | bytes, str | bytes] | None = None
        if secret:
            auth = (quote(self.settings.client_id, safe=""), quote(secret, safe=""))
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s, auth=auth) as client:
                reply = await client.post(metadata["token_endpoint"], data=form)
            tokens = reply.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise SignInFailed(
                f"the identity provider's token endpoint did not answer ({type(exc).__name__})"
            ) from exc
        if reply.status_code != 200 or not isinstance(tokens, dict):
            error = tokens.get("error") if isinstance(tokens, dict) else None
            raise SignInFailed(f"the identity provider refused the code ({error or reply.status_code})")
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise SignInFailed("the identity provider sent no ID token")
        access_token = tokens.get("access_token")
        claims = await self.verify(
            id_token, pending.nonce, access_token if isinstance(access_token, str) else None
        )
        return Verified(claims, id_token, float(claims["exp"]), pending.next_path)

    async def verify(self, id_token: str, nonce: str, access_token: str | None = None) -> dict[str, Any]:
        """The ID token's claims once its signature and claims hold, else :class:`SignInFailed`."""
        metadata = await self.metadata()
        announced = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = [a for a in announced if a in ASYMMETRIC]
        if not algorithms:  # (an empty list would mean the library's defaults, HMAC among them)
            raise SignInFailed("the identity provider announces no public-key algorithm for ID tokens")
        registry = JWSRegistry(algorithms=algorithms)
        try:
            try:
                token = jwt.decode(id_token, await self._keys(refresh=False), registry=registry)
            except InvalidKeyIdError:  # a key id not seen yet: the provider rotated its keys
                token = jwt.decode(id_token, await self._keys(refresh=True), registry=registry)
        except JoseError as exc:
            raise SignInFailed(f"the ID token's signature was refused ({exc.error})") from exc
        except ValueError as exc:
            raise SignInFailed("the ID token is not a signed JWT") from exc
        params: dict[str, Any] = {"nonce": nonce, "client_id": self.settings.client_id}
        if access_token:
            params["access_token"] = access_token  # checks at_hash when the token carries one
        options = {
            "iss": {"essential": True, "value": self.settings.issuer},
            "aud": {"essential": True, "values": [self.settings.client_id]},
            "nonce": {"essential": True},
        }
        claims = CodeIDToken(token.claims, token.header, options, params)
        try:
            claims.validate(now=int(time.time()), leeway=LEEWAY_S)
        except JoseError as exc:
            raise SignInFailed(
                f"the ID token was refused: {exc.error} ({exc.description or ''})".strip()
            ) from exc
        return dict(claims)

    async def end_session_url(self, id_token: str, post_logout_redirect_uri: str) -> str | None:
        """Where to send the browser to sign out at the provider too (None: it offers no such endpoint)."""
        try:
            endpoint = (await self.metadata()).get("end_session_endpoint")
        except SignInFailed:
            return None
        if not isinstance(endpoint, str):
            return None
        url: str = add_params_to_uri(
            endpoint,
            [
                ("id_token_hint", id_token),
                ("post_logout_redirect_uri", post_logout_redirect_uri),
                ("client_id", self.settings.client_id),
            ],
        )
        return url
