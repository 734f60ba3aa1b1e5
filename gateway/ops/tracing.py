"""Optional OpenTelemetry traces: a span per stage of a request when an OTLP endpoint is set.

Off (the default) it costs a shared no-op context manager per stage.  On, it needs
the ``otel`` extra (``pip install 'tiergate[otel]'``: opentelemetry-sdk and the
OTLP/HTTP exporter) and exports in batches to ``observability.otlp_endpoint``.

Spans of one chat request, nested through the context the request runs in:

    POST /v1/chat/completions      (server span: request id, route, status)
    ├── auth
    ├── rate_limit
    ├── cache.lookup               (result: hit, miss, bypass)
    ├── route                      (tier, reason)
    ├── tier.<name>                (the tier call, admission wait included; replica)
    └── ledger.write
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

_NOOP = contextlib.nullcontext()


class Tracing:
    """Spans for one app; ``exporter`` (an OpenTelemetry ``SpanExporter``) overrides the endpoint
    and is exported synchronously (tests pass the SDK's in-memory exporter)."""

    def __init__(self, endpoint: str = "", service_name: str = "tiergate", exporter: Any = None) -> None:
        self._provider: Any = None
        self._tracer: Any = None
        if not endpoint and exporter is None:
            return
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        except ImportError:
            log.error(
                "observability.otlp_endpoint is set but OpenTelemetry is not installed "
                "(pip install 'tiergate[otel]'); traces are off"
            )
            return
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        if exporter is not None:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
            log.info("OpenTelemetry traces go to %s", endpoint)
        self._provider = provider
        self._tracer = provider.get_tracer("tiergate")

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def span(self, name: str, **attributes: Any) -> contextlib.AbstractContextManager[Any]:
        """A child of the current span (or a root); a no-op when tracing is off."""
        if self._tracer is None:
            return _NOOP
        # The tracer is Any: OpenTelemetry is optional.
        context: contextlib.AbstractContextManager[Any] = self._tracer.start_as_current_span(
            name, attributes=attributes or None
        )
        return context

    @contextlib.contextmanager
    def server_span(self, name: str, **attributes: Any) -> Iterator[Any]:
        """The request's root span (kind SERVER); yields it so the status can be set later."""
        from opentelemetry.trace import SpanKind

        with self._tracer.start_as_current_span(name, kind=SpanKind.SERVER, attributes=attributes) as span:
            yield span

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()


def annotate(span: Any, **attributes: Any) -> None:
    """Set attributes on ``span`` when it is a real one (the no-op context yields None)."""
    if span is not None:
        span.set_attributes(attributes)
