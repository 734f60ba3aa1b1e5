"""Fuzz target: the chat request parser (msgspec decode of ChatCompletionRequest + the gateway's own
checks) and what the gateway derives from a parsed request before routing it.

    python fuzz/request_parser.py -runs=100000        # atheris / libFuzzer; any libFuzzer flag works

Without a corpus folder on the command line it starts from the seeds in ``fuzz/seeds/request_parser``
(valid requests, and ones that once crashed the parser) and keeps what it finds in a temporary folder.

Whatever the bytes, :func:`check` must either get a request or an ``InvalidRequest`` (a 400 in
OpenAI's shape); any other exception is a crash. A request that parses must survive a round trip
(encode, parse again: the same request) and the steps that follow parsing: routing features, the
cache key, the rate-limit demand, the conversation key. ``tests/fuzz/`` runs a bounded number of
runs of this target and a Hypothesis-driven version of the same check.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
SEEDS = Path(__file__).resolve().parent / "seeds" / "request_parser"


def _imports() -> None:
    global AnswerCache, CacheConfig, InvalidRequest, Metrics, conversation_key, demand_of
    global error_body, features_of, msgspec, parse_chat_request, AutoRule
    import msgspec

    from cache import CacheConfig
    from gateway.errors import InvalidRequest, error_body
    from gateway.ops.metrics import Metrics
    from gateway.pipeline.answers.exact import AnswerCache
    from gateway.pipeline.plan import conversation_key, features_of
    from gateway.pipeline.record import demand_of
    from gateway.wire.chat import parse_chat_request
    from router import AutoRule


_answers = None


def check(data: bytes) -> None:
    global _answers
    if _answers is None:
        _answers = AnswerCache(CacheConfig(enabled=False), None, AutoRule(), Metrics())
    try:
        request = parse_chat_request(data)
    except InvalidRequest as exc:
        body = msgspec.json.encode(error_body(exc))
        assert exc.status == 400 and exc.message and body.startswith(b'{"error":')
        return
    again = parse_chat_request(msgspec.json.encode(request))
    assert again == request, (request, again)
    features_of(request)
    demand_of(request)
    conversation_key(request, None)
    _answers.key(request, "tenant", "edge=m,cloud=m")


def main() -> None:
    import atheris

    with atheris.instrument_imports(include=["gateway", "cache", "router"]):
        _imports()
    argv = list(sys.argv)
    if all(arg.startswith("-") for arg in argv[1:]):  # no corpus given: a fresh one, plus the seeds
        argv += [tempfile.mkdtemp(prefix="tiergate-fuzz-"), str(SEEDS)]
    atheris.Setup(argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
else:
    _imports()
