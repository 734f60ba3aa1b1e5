"""``POST /v1/feedback``: a tenant says whether one of its answers was acceptable.

The body names the answer by the id the API gave it (``chatcmpl-…``, ``cmpl-…``, ``resp_…``) and
carries a ``score`` in [0, 1] or a ``label`` (``good``/``bad``), and an optional ``note`` (at most
1,000 characters).  It comes in through the one front (the key, the tenant's request limits), and the
label goes to the router's quality model (gateway/accounts/quality/feedback.py says what counts and when a
repeat is a 409).  Another tenant's answer is a 404, as an unknown one is.
"""

from __future__ import annotations

import msgspec
from litestar import Request, Response, post
from litestar.datastructures import State
from litestar.di import NamedDependency

from gateway.accounts.quality.feedback import FeedbackRequest
from gateway.errors import InvalidRequest, NotFound, PayloadTooLarge
from gateway.ops.request_id import request_id
from gateway.pipeline.front import Incoming
from gateway.services import Services
from gateway.wire.chat import encode
from gateway.wire.decoding import decode_error

MAX_BODY = 8192
_decoder = msgspec.json.Decoder(FeedbackRequest)


@post("/v1/feedback", status_code=200)
async def feedback(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    if services.outcomes is None:
        raise NotFound("feedback is not taken here")
    front = services.pipeline.front
    body = await request.body()

    async def read() -> bytes:
        return body

    incoming = Incoming(request.headers, read, request_id(request.scope), endpoint="feedback")
    caller = await front.caller(incoming)
    call = front.begin(caller, incoming, "feedback")
    await front.admit(call)
    if len(body) > MAX_BODY:
        raise PayloadTooLarge(f"a feedback body is at most {MAX_BODY} bytes")
    try:
        asked = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise decode_error(exc) from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"invalid request: malformed JSON: {exc}") from exc
    answer = services.outcomes.feedback(call.tenant.name, asked)
    return Response(encode(answer), media_type="application/json")


FEEDBACK_ROUTES = [feedback]
