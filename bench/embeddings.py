"""Embeddings per second: ``POST /v1/embeddings`` through the gateway vs the raw ONNX Runtime session.

Method
------
* The model: all-MiniLM-L6-v2 as ``tiergate models export-embedding`` built it
  (``<build_cache_dir>/models/all-minilm-l6-v2-onnx``), fp32, CPU, ONNX Runtime's default threads (one per
  core; it then pins its pool threads to cores, never the caller) on both sides, or ``--threads N`` on
  both sides (``embedding.threads``: N threads, none pinned).
* Inputs: short English sentences (10–14 tokens with [CLS]/[SEP]), each made unique by a counter, so no
  input is ever answered from the gateway's cache (every one is computed, and stored: the cache's write
  is part of the gateway's cost).  Batch sizes 1, 16 and 64 texts per request / per call.
* ``raw``: in this process, the tier's own ``tokenizers`` tokenizer and ``InferenceSession`` (made by
  ``OnnxEmbedder.load``, so with the same session options as in the gateway) called directly:
  ``encode_batch``, padding to the longest row, one ``run`` per batch — the least any caller of the
  model does, with none of the tier's batcher or the gateway around it.  One caller, calls back to back.
* ``floor``: ``bench/embeddings_floor.py`` in a child process, the least HTTP server around the same
  model (a bare ASGI app on uvicorn with uvloop and httptools, as tiergate serves; ``Raw``'s tokenizer
  and session on one worker thread; no key, limits, cache or ledger): what any Python server pays for
  the HTTP round trip and the hand-off to the model's thread.  ``floor-inline`` runs the model on that
  server's event loop instead (blocking it, which no server of many clients may do): the HTTP round
  trip alone.  Same client as the gateway's.
* ``gateway``: a real ``tiergate serve`` child process (no chat tier, open-mode auth, the default disk
  cache and ledger: a ledger row per request, durable before the answer), called over loopback HTTP with
  keep-alive connections on plain sockets (``Client``: the least client CPU on the shared cores), JSON
  floats (``encoding_format`` float; the answer is decoded with msgspec).
  ``c1``: one client, requests back to back (each waits for the last: the gateway's whole overhead is
  on the path); ``c4``: 4 clients at once (the gateway overlaps its work with the model's, and its
  batcher may merge requests into one call: that is what it is for).
* Rounds: each (path, batch) cell runs ``--seconds`` of calls per round, cells interleaved, ``--repeats``
  rounds; the table shows the median over rounds of embeddings/s, and ``vs raw`` is the median over
  rounds of (path / raw in the same round); ``vs floor`` the same of (gateway c1 / floor c1).  The
  machine is shared (2 cores with other work, the HTTP client on the same cores as the gateway): read
  ratios, not absolute numbers.

    .venv/bin/python -m bench.embeddings [--repeats 5] [--seconds 2] [--batches 1,16,64]

Prints a table and writes bench/results/embeddings.json.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np

from bench.edge import free_port, machine
from gateway.settings import load_settings
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig, OnnxEmbedder

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "embeddings.json"
MODEL = "all-MiniLM-L6-v2"
SENTENCES = [
    "The quick brown fox jumps over the lazy dog",
    "A man is eating a piece of bread at the station",
    "Rain is expected in Lisbon on Thursday afternoon",
    "The invoice was paid two weeks after the deadline",
]
_counter = itertools.count()


def texts(n: int) -> list[str]:
    """n short sentences never sent before (a counter makes each unique)."""
    return [f"{SENTENCES[i % len(SENTENCES)]} number {next(_counter)}" for i in range(n)]


class Raw:
    """The embedding tier's own tokenizer and ONNX Runtime session (same options), called directly."""

    def __init__(self, folder: Path, threads: int = 0) -> None:
        embedder = OnnxEmbedder(EmbeddingConfig(model_dir=str(folder), threads=threads))
        embedder.load()
        self.tokenize = embedder.tokenize
        self.session = embedder.session()

    def embed(self, batch: list[str]) -> np.ndarray:
        return self.run(self.tokenize(batch))

    def run(self, rows: list[list[int]]) -> np.ndarray:
        width = max(map(len, rows))
        ids = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
        (out,) = self.session.run(None, {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)})
        return np.asarray(out)


class Server:
    """A child process serving ``POST /v1/embeddings`` on a free loopback port, stopped by :meth:`stop`."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port)], stdout=log.open("wb"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited; see {log}")
            try:
                if httpx.post(f"{self.url}/v1/embeddings", json={"model": MODEL, "input": "hi"}).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{command[0]} did not answer embeddings; see {log}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def gateway(tmp: Path, extra_toml: str = "") -> Server:
    """``tiergate serve``: no chat tier, open-mode auth, the default cache and ledger."""
    config = tmp / "embeddings.toml"
    config.write_text(
        f'data_dir = "{tmp / "data"}"\n[edge]\nenabled = false\n[cloud]\nenabled = false\n'
        '[auth]\nopen_mode = true\n[observability]\nlog_format = "text"\n' + extra_toml.replace("\\n", "\n")
    )
    tiergate = str(Path(sys.executable).with_name("tiergate"))
    return Server([tiergate, "serve", "--config", str(config)], tmp / "gateway.log")


def floor(tmp: Path, folder: Path, threads: int, inline: bool) -> Server:
    """``bench/embeddings_floor.py``: a bare HTTP server around the same model (``inline``: on its loop)."""
    command = [sys.executable, "-m", "bench.embeddings_floor", str(folder), str(threads)]
    name = "floor-inline" if inline else "floor"
    return Server(command + ["--inline"] * inline, tmp / f"{name}.log")


def timed(seconds: float, call: Callable[[], int]) -> float:
    """Embeddings per second of ``call`` (returns how many it made) repeated for about ``seconds``."""
    started = time.perf_counter()
    done = timed_count(seconds, call)
    return done / (time.perf_counter() - started)


class Client:
    """One keep-alive HTTP/1.1 connection on a plain socket: the request's bytes written at once, the
    answer read by its Content-Length.  Not ``http.client``: its header parsing (the ``email``
    package) cost 0.76 ms of this process's CPU per one-text request, measured, on the same 2 cores as
    the gateway and the model, and the raw side pays no client at all; this one costs ~0.1 ms.  The
    answer is still read whole and decoded with msgspec, and a status other than 200 fails the run."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
        self.buffer = b""

    def embed(self, batch: int) -> int:
        body = msgspec.json.encode({"model": MODEL, "input": texts(batch)})
        self.sock.sendall(
            self.head + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        status, answer = self._response()
        if status != 200:
            raise RuntimeError(f"{status}: {answer[:200]!r}")
        return len(msgspec.json.decode(answer)["data"])

    def _response(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._recv()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        length = next(
            int(v) for k, _, v in (ln.partition(b":") for ln in lines[1:]) if k.lower() == b"content-length"
        )
        while len(self.buffer) < length:
            self._recv()
        answer, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), answer

    def _recv(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("the gateway closed the connection")
        self.buffer += chunk


def concurrent(port: int, batch: int, clients: int, seconds: float) -> float:
    """Embeddings per second of ``clients`` threads, each with its own connection, for ``seconds``."""
    conns = [Client(port) for _ in range(clients)]
    with ThreadPoolExecutor(clients) as pool:
        started = time.perf_counter()
        made = sum(pool.map(lambda c: timed_count(seconds, lambda: c.embed(batch)), conns))
        return made / (time.perf_counter() - started)


def timed_count(seconds: float, call: Callable[[], int]) -> int:
    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        done += call()
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument(
        "--gateway-toml", default="", help="more settings for the gateway (\\n between lines)"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="embedding.threads on both sides (0: ONNX Runtime's default)"
    )
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    folder = Path(load_settings().build_cache_dir).expanduser() / DEFAULT_EMBEDDING_MODEL_DIR
    raw = Raw(folder, args.threads)
    extra = args.gateway_toml + (f"\n[embedding]\nthreads = {args.threads}\n" if args.threads else "")
    paths = ("raw", "floor-inline c1", "floor c1", "gateway c1", "gateway c4")
    rates: dict[tuple[str, int], list[float]] = {(p, b): [] for p in paths for b in batches}
    with tempfile.TemporaryDirectory(prefix="bench-embeddings-") as tmp:
        servers: dict[str, Server] = {}
        try:  # each started one is stopped, also when a later one fails to start
            servers["floor-inline"] = floor(Path(tmp), folder, args.threads, inline=True)
            servers["floor"] = floor(Path(tmp), folder, args.threads, inline=False)
            servers["gateway"] = gateway(Path(tmp), extra)
            for batch in batches:  # warm every side up
                raw.embed(texts(batch))
                for server in servers.values():
                    Client(server.port).embed(batch)
            for round_ in range(args.repeats):
                for batch in batches:
                    order = paths if round_ % 2 == 0 else tuple(reversed(paths))
                    for path in order:
                        name, _, width = path.partition(" ")
                        if path == "raw":
                            rate = timed(args.seconds, lambda b=batch: len(raw.embed(texts(b))))
                        elif width == "c1":  # a new connection: an idle one is closed after 5 s
                            c1 = Client(servers[name].port)
                            rate = timed(args.seconds, functools.partial(c1.embed, batch))
                        else:
                            rate = concurrent(servers[name].port, batch, 4, args.seconds)
                        rates[(path, batch)].append(rate)
        finally:
            for server in servers.values():
                server.stop()
    rows = []
    print(f"{'batch':>5} {'path':<15} {'embeddings/s':>12} {'vs raw':>7} {'vs floor':>8}")
    for batch in batches:
        for path in paths:
            got = rates[(path, batch)]
            row: dict[str, Any] = {
                "batch": batch,
                "path": path,
                "embeddings_per_s": round(statistics.median(got), 1),
                "vs_raw": paired(got, rates[("raw", batch)]),
                # the gateway against the bare server with the same clients: its own work's share
                "vs_floor": paired(got, rates[("floor c1", batch)]) if path == "gateway c1" else None,
                "rounds": [round(r, 1) for r in got],
            }
            rows.append(row)
            floor_ratio = f"{row['vs_floor']:>8.1%}" if row["vs_floor"] is not None else ""
            print(f"{batch:>5} {path:<15} {row['embeddings_per_s']:>12} {row['vs_raw']:>7.1%} {floor_ratio}")
    fields = {"model": MODEL, "repeats": args.repeats, "seconds_per_cell": args.seconds, "rows": rows}
    write_results(RESULTS, "bench.embeddings", argv, fields)
    return 0


def paired(got: list[float], base: list[float]) -> float:
    """The median over rounds of got / base in the same round."""
    return round(statistics.median(g / b for g, b in zip(got, base, strict=True)), 3)


def write_results(path: Path, module: str, argv: list[str] | None, fields: dict[str, Any]) -> None:
    """``fields`` with the machine and the command that made them, as JSON at ``path``."""
    command = f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), "command": command, **fields}, indent=2) + "\n")
    print(f"\nwrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
