"""The gateway's exceptions, and the one place they become OpenAI-shaped responses.

    GatewayError                     status  type
    ├── InvalidRequest                400    invalid_request_error
    ├── AuthenticationFailed          401    invalid_request_error / invalid_api_key (OpenAI's type)
    ├── PermissionDenied              403    permission_error
    ├── ModelNotAllowed               403    invalid_request_error / model_not_found: a tier the key
    │                                        may not use (OpenAI's answer to a restricted project key)
    ├── NotFound                      404    invalid_request_error / not_found
    │   └── ModelNotFound             404    invalid_request_error / model_not_found
    ├── WrongKindOfModel              404/403 invalid_request_error (code null): a model of another
    │                                        endpoint (gateway/pipeline/tierset.py)
    ├── Conflict                      409    invalid_request_error / conflict
    ├── PayloadTooLarge               413    invalid_request_error
    ├── UnsupportedMediaType          415    invalid_request_error / unsupported_media
    ├── UnprocessableMedia            422    invalid_request_error / corrupt_media
    ├── RateLimited                   429    rate_limit_exceeded (with Retry-After)
    │   └── QuotaExceeded             429    insufficient_quota / insufficient_quota: a budget spent
    ├── UpstreamFailed                502    upstream_error
    ├── ServiceUnavailable            503    service_unavailable
    │   └── ModalityUnavailable       503    service_unavailable / modality_unavailable
    └── StorageUnavailable            503    service_unavailable / storage_unavailable

On Anthropic's Messages API (``/v1/messages…``) the same errors leave in Anthropic's shape
(:func:`anthropic_error_body`: its type by status; a 503 is its 529 ``overloaded_error``).

Lower layers raise their own errors (``tiers.TierError``, the router's
``NoTierAvailable``, Litestar's ``HTTPException``); :func:`to_gateway_error`
maps each to one of these at the boundary.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from litestar import Request, Response
from litestar.datastructures import State
from litestar.exceptions import HTTPException

import router
import tiers

log = logging.getLogger(__name__)


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.extra_headers: dict[str, str] = {}  # e.g. a 405's Allow

    def headers(self) -> dict[str, str]:
        return self.extra_headers


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        # A request refused for one of its fields always says what kind of fault, as OpenAI's
        # validation errors do (``invalid_value`` unless the check names a sharper code).
        super().__init__(message, param=param, code=code or ("invalid_value" if param else None))


class AuthenticationFailed(GatewayError):
    status = 401
    type = "invalid_request_error"  # as OpenAI answers a missing or wrong key
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "permission_denied"


class ModelNotAllowed(GatewayError):
    """A model (a tier) this key may not use. OpenAI answers a project key restricted from a model
    with 403, type ``invalid_request_error``, code ``model_not_found`` and "Project `proj_…` does not
    have access to model `gpt-4o-mini`" (seen in openai-python users' reports; OpenAI's error-code
    page does not list it): the same shape and words, naming the key instead of a project."""

    status = 403
    type = "invalid_request_error"
    code = "model_not_found"

    @classmethod
    def for_key(cls, key_id: str | None, tier: str, tiers: tuple[str, ...], why: str = "") -> ModelNotAllowed:
        """``why``: how the request came to that tier when the key did not name it (its policy)."""
        who = "This key" if key_id is None else f"Key `{key_id}`"
        return cls(
            f"{who} does not have access to model `{tier}`{why} (its tiers: {', '.join(tiers)})",
            param="model",
        )


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(NotFound):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class WrongKindOfModel(GatewayError):
    """A model that exists, named at an endpoint that does not serve its kind: OpenAI's 404 (403 on
    /v1/embeddings), ``code`` null as OpenAI's."""

    type = "invalid_request_error"

    def __init__(self, message: str, *, status: int, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status


class Conflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


BODY_TOO_LARGE = "the request body is larger than this gateway accepts (setting server.max_body_bytes)"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class UnsupportedMediaType(GatewayError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media"


class UnprocessableMedia(GatewayError):
    status = 422
    type = "invalid_request_error"
    code = "corrupt_media"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_exceeded"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, reason: str = "other") -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        # Why, as a short class for metrics: tenant_requests, tenant_tokens, ..., queue_fast, queue_slow.
        self.reason = reason

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, math.ceil(self.retry_after_s)))}


# OpenAI's words for a spent quota (its error-code guide, and what its API sends with 429).
QUOTA_MESSAGE = "You exceeded your current quota, please check your plan and billing details"


class QuotaExceeded(RateLimited):
    """A budget (a key's, a tenant's, a cost tag's) spent: OpenAI's quota error, 429 with type and code
    ``insufficient_quota``, not a rate: waiting seconds does not help, so ``x-should-retry: false``
    tells OpenAI's SDKs not to retry it (Retry-After still says when the period ends)."""

    type = "insufficient_quota"
    code = "insufficient_quota"

    def __init__(self, detail: str, *, retry_after_s: float = 1.0, reason: str = "budget") -> None:
        super().__init__(
            f"{QUOTA_MESSAGE} (over budget: {detail}).", retry_after_s=retry_after_s, reason=reason
        )

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "x-should-retry": "false"}


class UpstreamFailed(GatewayError):
    status = 502
    type = "upstream_error"


class ServiceUnavailable(GatewayError):
    """Tiers are starting, down or behind an open breaker: a retry a little later can succeed."""

    status = 503
    type = "service_unavailable"
    code = "no_tier_available"
    retry_after_s = 2

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class ModalityUnavailable(ServiceUnavailable):
    """A modality's path is broken on every tier that takes it, and the request may not be degraded."""

    code = "modality_unavailable"


class StorageUnavailable(GatewayError):
    """The database cannot be reached and the answer needs it (e.g. a key not seen before)."""

    status = 503
    type = "service_unavailable"
    code = "storage_unavailable"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


_HTTP_STATUS_ERRORS: dict[int, type[GatewayError]] = {
    400: InvalidRequest,
    401: AuthenticationFailed,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    429: RateLimited,
}


def _http(exc: HTTPException) -> GatewayError:
    if exc.status_code == 413:
        return PayloadTooLarge(BODY_TOO_LARGE)
    cls = _HTTP_STATUS_ERRORS.get(exc.status_code, InvalidRequest)
    error = cls("no such endpoint" if exc.status_code == 404 else exc.detail or "bad request")
    error.status = exc.status_code
    allowed = {k.lower(): v for k, v in (exc.headers or {}).items()}.get("allow")
    if allowed:  # a 405 says which methods the path takes
        error.extra_headers = {"Allow": allowed}
    return error


def _tier_busy(exc: tiers.TierOverloaded) -> GatewayError:
    return RateLimited(
        f"the {exc.tier} tier is busy: {exc.message}", retry_after_s=exc.retry_after_s, reason=exc.reason
    )


def _over_budget(exc: router.BudgetExhausted) -> GatewayError:
    return QuotaExceeded(str(exc), retry_after_s=exc.retry_after_s)


# The request field behind each ability a tier may lack.
_ABILITY_PARAM = {
    tiers.Ability.TOOLS: "tools",
    tiers.Ability.JSON_OBJECT: "response_format",
    tiers.Ability.JSON_SCHEMA: "response_format",
    tiers.Ability.LOGPROBS: "logprobs",
    tiers.Ability.CHOICES: "n",
    tiers.Ability.LOGIT_BIAS: "logit_bias",
}


def _does_not_fit(exc: router.RequestDoesNotFit) -> GatewayError:
    message = f"no tier can take this request: {exc}"
    why = exc.exclusions
    if kept := next((e for e in why if isinstance(e, router.KeptLocal)), None):
        return InvalidRequest(
            f"{message}; no tier marked local can serve it (residency rule {kept.rule!r})",
            param="messages",
            code="residency_keep_local",
        )
    if why and all(isinstance(e, router.ContextTooSmall) for e in why):
        return InvalidRequest(message, param="messages", code="context_length_exceeded")
    lacking = sorted(a for e in why if isinstance(e, router.Lacks) for a in e.abilities)
    if lacking:
        return InvalidRequest(message, param=_ABILITY_PARAM[lacking[0]], code="unsupported_parameter")
    return InvalidRequest(message, code="request_does_not_fit")


def _rejected(exc: tiers.TierRejected) -> GatewayError:
    return InvalidRequest(
        f"the {exc.tier} tier rejected the request: {exc.message}", param=exc.param, code=exc.code
    )


# Every lower layer's error class → how it becomes one of the gateway's.  The most specific class
# in an exception's MRO that is listed here decides (so TierTimeout maps as TierUnavailable).
ERROR_TABLE: dict[type[Exception], Callable[[Any], GatewayError]] = {
    tiers.TierOverloaded: _tier_busy,
    tiers.TierRejected: _rejected,
    tiers.TierUnavailable: lambda e: ServiceUnavailable(f"the {e.tier} tier is unavailable: {e.message}"),
    tiers.OutputRefused: lambda e: UpstreamFailed(
        f"the {e.tier} tier failed: {e.message}", code="invalid_model_output"
    ),
    tiers.TierError: lambda e: UpstreamFailed(f"the {e.tier} tier failed: {e.message}"),
    router.BudgetExhausted: _over_budget,
    router.RequestDoesNotFit: _does_not_fit,
    router.NoTierAvailable: lambda e: ServiceUnavailable(f"no tier can serve this request now: {e}"),
    router.PolicyInvalid: lambda e: InvalidRequest(e.message, param=e.field or None, code="invalid_policy"),
    tiers.UnknownModel: lambda e: NotFound(e.message, param="name"),
    tiers.NothingToRollBack: lambda e: Conflict(e.message),
    tiers.InvalidModel: lambda e: InvalidRequest(e.message, code="invalid_model"),
    HTTPException: _http,
}


def to_gateway_error(exc: Exception) -> GatewayError:
    """Map an exception from any layer to the gateway's tree (``raise ... from`` at the boundary)."""
    if isinstance(exc, GatewayError):
        return exc
    for cls in type(exc).__mro__:
        convert = ERROR_TABLE.get(cls)
        if convert is not None:
            return convert(exc)
    log.exception("unexpected error", exc_info=exc)
    return GatewayError("internal error; the gateway logged the details")


def error_body(error: GatewayError) -> dict[str, dict[str, str | None]]:
    return {"error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}}


# Anthropic's Messages API names its errors by status: its clients raise by the status (the anthropic
# SDK's OverloadedError is a 529, Anthropic's "temporarily overloaded"), and read the type.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
ANTHROPIC_PATH = "/v1/messages"


def anthropic_status(error: GatewayError) -> int:
    """The status an Anthropic client gets: a 503 (the tiers busy, starting or down) is its 529."""
    return 529 if error.status == 503 else error.status


def anthropic_error_body(error: GatewayError) -> dict[str, object]:
    status = anthropic_status(error)
    kind = ANTHROPIC_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def error_response(request: Request[object, object, State], exc: Exception) -> Response[object]:
    """Litestar exception handler: every error leaves in OpenAI's shape, and on Anthropic's Messages
    API (``/v1/messages…``) in Anthropic's."""
    error = to_gateway_error(exc)
    if isinstance(error, RateLimited):
        services = request.app.state.get("services")  # None before the app has started
        if services is not None:
            services.metrics.rate_limited(error.reason)
    path = request.scope["path"]
    if path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/"):
        body = anthropic_error_body(error)
        return Response(content=body, status_code=anthropic_status(error), headers=error.headers())
    return Response(content=error_body(error), status_code=error.status, headers=error.headers())
