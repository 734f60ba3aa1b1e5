"""``bench/upstream.py``'s fast canned OpenAI answers over TLS, offering HTTP/2 (``h2``) and HTTP/1.1 by
ALPN, as a hosted provider's endpoint does: the upstream of ``bench.provider_overhead``'s provider
tiers.  HTTP/1.1 connections get ``bench.upstream.Upstream`` itself; HTTP/2 ones a small server on the
``h2`` state machine (every stream answered when it ends; answers fit the initial flow-control
window).

    python -m bench.upstream_tls PORT CERT_FILE KEY_FILE
"""

from __future__ import annotations

import asyncio
import ssl
import sys

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import uvloop

from bench.upstream import COMPLETION, STREAM_EVENTS, Upstream


class H2Upstream(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.initiate_connection()
        self.bodies: dict[int, bytes] = {}
        self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.bodies[event.stream_id] = b""
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] = self.bodies.get(event.stream_id, b"") + event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self._answer(event.stream_id, self.bodies.pop(event.stream_id, b""))
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.transport.close()
        self.transport.write(self.conn.data_to_send())

    def _answer(self, stream_id: int, body: bytes) -> None:
        stream = b'"stream":true' in body.replace(b" ", b"")
        payload = STREAM_EVENTS if stream else COMPLETION
        kind = b"text/event-stream" if stream else b"application/json"
        headers = [(b":status", b"200"), (b"content-type", kind), (b"content-length", b"%d" % len(payload))]
        self.conn.send_headers(stream_id, headers)
        self.conn.send_data(stream_id, payload, end_stream=True)


class ByAlpn(asyncio.Protocol):
    """HTTP/2 or HTTP/1.1, as the client and the server agreed in the TLS handshake."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        self.inner: asyncio.Protocol = H2Upstream() if alpn == "h2" else Upstream()
        print(alpn or "http/1.1", flush=True)  # one line per connection: what the client agreed to
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)  # type: ignore[attr-defined]


async def main(port: int, cert_file: str, key_file: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    context.set_alpn_protocols(["h2", "http/1.1"])
    server = await asyncio.get_running_loop().create_server(
        ByAlpn, "127.0.0.1", port, ssl=context, backlog=4096
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
