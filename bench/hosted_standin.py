"""The hosted model of the three-tier route replay: the OpenAI stand-in of the provider tests
(``tests/standins/openai_provider.py``: every body checked against the ``openai`` SDK's types and
OpenAI's OpenAPI document, answers built with the SDK's models, usage reported) served over TLS on
loopback with a test CA, with a seeded latency model (``tests/standins/latency.py``).

    python -m bench.hosted_standin --port 8443 --certs DIR --key sk-... [--ttft-median-s 0.5]

``DIR`` holds ``ca.pem``, ``server.pem`` and ``server.key`` (``tests.standins.tls.TestCA.make``);
when the server has started it writes ``DIR/ready``.  On exit (SIGTERM) it writes what it served to
``DIR/served.json``: requests, requests the checks refused (``invalid``: should stay 0) and usage.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when served: bench.route_replay needs only the options
    from tests.standins.latency import LatencyModel


def model_from(args: argparse.Namespace) -> LatencyModel:
    from tests.standins.latency import LatencyModel

    return LatencyModel(
        ttft_median_s=args.ttft_median_s,
        ttft_sigma=args.ttft_sigma,
        tokens_per_s_low=args.tokens_per_s_low,
        tokens_per_s_high=args.tokens_per_s_high,
        answer_median_tokens=args.answer_median_tokens,
        answer_sigma=args.answer_sigma,
        seed=args.seed,
    )


def add_latency_options(parser: argparse.ArgumentParser) -> None:
    """The latency model's parameters (tests/standins/latency.py), with the replay's defaults."""
    parser.add_argument("--ttft-median-s", type=float, default=0.5)
    parser.add_argument("--ttft-sigma", type=float, default=0.4)
    parser.add_argument("--tokens-per-s-low", type=float, default=60.0)
    parser.add_argument("--tokens-per-s-high", type=float, default=100.0)
    parser.add_argument("--answer-median-tokens", type=int, default=300)
    parser.add_argument("--answer-sigma", type=float, default=0.6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--certs", type=Path, required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--seed", type=int, default=1)
    add_latency_options(parser)
    args = parser.parse_args()
    import uvicorn

    from tests.standins.openai_provider import OpenAIStandIn

    app = OpenAIStandIn(key=args.key, latency=model_from(args))
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=args.port,
        ssl_certfile=str(args.certs / "server.pem"),
        ssl_keyfile=str(args.certs / "server.key"),
        log_level="warning",
        lifespan="off",
        timeout_keep_alive=60,
    )

    class Ready(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            (args.certs / "ready").write_text(str(args.port))

    # uvicorn handles SIGTERM and SIGINT while it runs, then raises the signal again once it has
    # stopped: these handlers let that one pass, so what was served is written below.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    Ready(config).run()
    served = {
        "requests": len(app.requests),
        "invalid": app.invalid,
        "prompt_tokens": sum(u.prompt_tokens for u in app.usages),
        "completion_tokens": sum(u.completion_tokens for u in app.usages),
    }
    (args.certs / "served.json").write_text(json.dumps(served))


if __name__ == "__main__":
    main()
