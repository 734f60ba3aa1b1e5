"""The cloud tier: a pool of OpenAI-compatible vLLM servers behind one pooled HTTP client.

Requests go through :mod:`tiers.cloud._http`, a keep-alive client on httptools, because it
was measured: per request it costs the gateway ~50 µs of CPU where ``aiohttp.ClientSession``
costs ~145 µs and ``httpx.AsyncClient`` ~550 µs (``python -m bench.upstream_client``).
Health checks and metric scrapes, off the hot path, use aiohttp (:mod:`tiers.cloud._probe`).

Each request goes to the replica the :class:`~tiers.cloud._balance.Balancer`
picks from live load; a failure before the answer's first event is retried on
another replica (the client has seen nothing yet), and replicas that keep failing
are ejected for a while.  Membership can change at run time
(:meth:`VLLMPool.set_members`): new replicas join, removed ones drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import msgspec

from tiers._errors import TierError, TierFailed, TierRejected, TierTimeout, TierUnavailable
from tiers._events import Event, Finished
from tiers._protocol import ReplicaListener
from tiers._types import Capabilities, Generation, Health, Modality, TierState
from tiers.cloud import _wire
from tiers.cloud._balance import Balancer
from tiers.cloud._checks import OutputCheck
from tiers.cloud._config import CloudConfig
from tiers.cloud._http import HttpPool, Response, UpstreamError
from tiers.cloud._local import LocalVLLMServer
from tiers.cloud._probe import Prober
from tiers.cloud._replica import Replica

log = logging.getLogger(__name__)

_JSON_HEADERS = {"Content-Type": "application/json"}


class _Retry(Exception):
    """This replica failed before the client saw anything; another may serve the request.

    Only transport failures (refused, reset, timed out) count towards ejecting the replica: one
    that answers 5xx is alive, and the failure may belong to the request (its image path, say),
    which the gateway's per-modality breakers judge.
    """

    def __init__(self, error: TierError, *, eject: bool) -> None:
        self.error = error
        self.eject = eject


class VLLMPool:
    def __init__(self, config: CloudConfig, log_dir: str | None = None, name: str = "cloud") -> None:
        self.name = name  # the tier's name in configuration (clients pin it by this name)
        self._config = config
        self._local = (
            LocalVLLMServer(config.local, log_dir) if not config.urls and config.local.enabled else None
        )
        self._model = config.model or (config.local.served_model_name if self._local else "")
        self._balancer = Balancer(
            strategy=config.balancing, bound=config.affinity_bound, slow_start_s=config.slow_start_s
        )
        self._replicas: list[Replica] = []
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._probe = Prober()  # health checks and scrapes
        self._http: HttpPool | None = None  # requests
        self._capabilities: Capabilities | None = None
        self._mean_cost = 100.0
        self._next_index = 0
        self._pending_urls = config.urls or ([self._local.url] if self._local else [])
        self._listener: ReplicaListener | None = None

    # -- Tier -----------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        # Read several times per request; only the model name can change (learned from /v1/models).
        if self._capabilities is None or self._capabilities.model != (self._model or "unknown"):
            self._capabilities = Capabilities(
                modalities=frozenset({Modality.TEXT, *self._config.modalities}),
                max_context_tokens=self._config.max_context_tokens,
                model=self._model or "unknown",
                limits=self._config.limits.as_limits(),
                quality=self._config.quality,
                abilities=frozenset(self._config.abilities),
            )
        return self._capabilities

    def state(self) -> TierState:
        members = [r for r in self._replicas if not r.draining] or self._replicas
        if not members and not self._pending_urls:
            return TierState(self.name, Health.DISABLED, detail="no vLLM server configured")
        now = time.monotonic()
        up = sum(r.available(now) for r in members)
        if up:
            health = Health.READY
        elif self._local is not None and self._local.starting:
            health = Health.STARTING
        else:
            health = Health.DOWN
        detail = f"{up}/{len(members)} replicas healthy"
        if not up:
            errors = [f"{r.name}: {r.last_error}" for r in members if r.last_error]
            detail += "".join(f"; {e}" for e in errors[:3])
        if self._local is not None and not up:
            detail += f"; local server: {self._local.status}"
        # Serving and queued apart (vLLM's waiting requests are ours in flight too), and its slots:
        # while it queues none of ours, one more than it serves (a request sent now starts at once,
        # beside the others: vLLM batches up to max_num_seqs), else the batch it ran when some
        # waited.  The router's book then waits for vLLM's queue, not for the longest request
        # in flight (which it read as a one-slot tier's: after a saturated replay the cloud's
        # predictions ran to 5x what it answered in).
        # (queued: all vLLM's waiting requests, other clients' too, as the scaling signal wants.)
        queued = sum(int(r.engine.waiting) for r in members)
        in_flight = sum(r.in_flight - r.waiting_ours() for r in members)
        batch = sum(r.batch for r in members)
        slots = batch if queued else max(batch, in_flight + 1)
        return TierState(self.name, health, in_flight, queued, detail, self.replicas(), slots=slots)

    def replicas(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self._replicas]

    async def start(self) -> None:
        t = self._config.timeouts
        self._http = HttpPool(
            max_connections=self._config.max_connections,
            connect_s=t.connect_s,
            read_s=t.first_byte_s,
            total_s=t.total_s,
        )
        await self._probe.start()
        if self._local is not None:
            await self._local.start()
        self.set_members(self._pending_urls)

    async def aclose(self) -> None:
        for task in self._watchers.values():
            task.cancel()
        for task in self._watchers.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._probe.aclose()
        if self._http is not None:
            await self._http.aclose()
        if self._local is not None:
            await self._local.stop()

    def set_members(self, urls: Sequence[str]) -> None:
        """Make the pool these URLs: new ones join (after a health check), missing ones drain and leave."""
        wanted = [u.rstrip("/") for u in urls]
        known = {r.url: r for r in self._replicas}
        for url in wanted:
            if url in known:
                known[url].draining = False
            else:
                replica = Replica(url, f"{self.name}-{self._next_index}")
                self._next_index += 1
                self._replicas.append(replica)
                self._watchers[url] = asyncio.create_task(self._watch(replica), name=f"watch {url}")
        for replica in list(self._replicas):
            if replica.url not in wanted and not replica.draining:
                self.drain(replica.name)
        self._balancer.set_members([r.name for r in self._replicas if not r.draining])
        self._pending_urls = []

    def drain(self, name: str) -> bool:
        """Take a replica out of rotation; it leaves the pool when its last request ends."""
        replica = next((r for r in self._replicas if r.name == name), None)
        if replica is None:
            return False
        replica.draining = True
        self._balancer.set_members([r.name for r in self._replicas if not r.draining])
        if replica.in_flight == 0:
            self._remove(replica)
        log.info("cloud replica %s (%s) is draining", replica.name, replica.url)
        return True

    # -- replica state shared with other gateways -------------------------------

    def watch_replicas(self, listener: ReplicaListener) -> None:
        """Call ``listener`` when a replica's health flips or it is ejected (what peers should know)."""
        self._listener = listener

    def apply_replica_state(self, url: str, *, healthy: bool, ejected_for_s: float, why: str) -> None:
        """Take what another gateway saw of a replica: an ejection (for the time it has left) or a
        failed health check (until this gateway's next check of its own). A recovery is not taken:
        each gateway sees it with its own check."""
        replica = next((r for r in self._replicas if r.url == url.rstrip("/")), None)
        if replica is None:
            return
        if ejected_for_s > 0:
            replica.ejected_until = max(replica.ejected_until, time.monotonic() + ejected_for_s)
        elif not healthy and replica.healthy:
            replica.health_checked(False, why)
        else:
            return
        replica.last_error = why or replica.last_error
        log.info("cloud replica %s: peer reports %s", url, why or ("healthy" if healthy else "unhealthy"))

    def _tell(self, replica: Replica) -> None:
        if self._listener is not None:
            ejected = max(0.0, replica.ejected_until - time.monotonic())
            self._listener(replica.url, replica.healthy, ejected, replica.last_error)

    # -- requests ---------------------------------------------------------------

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        """The answer from one replica: streamed (with the usage chunk) when ``gen.stream``, else read
        whole as one JSON body first. Until the first event a failing replica is retried on another,
        since the consumer has seen nothing; after it a failure ends the stream."""
        tried: set[str] = set()
        last: TierError | None = None
        body = _wire.request_body(gen, self._model)
        check = OutputCheck(gen, self.name)
        # One deadline for the request, however many replicas it tries.
        deadline = asyncio.get_running_loop().time() + self._config.timeouts.total_s
        while True:
            replica = self._pick(gen, tried, last)
            self._begin(replica, gen)
            started = time.perf_counter()
            resp: Response | None = None
            try:
                resp = await self._post(replica, body, gen, deadline, whole=not gen.stream)
                if resp.status != 200:
                    raise self._status_error(replica, resp.status, await resp.read())
                if gen.stream:
                    events = _wire.stream_events(resp.chunks(), replica.name, self._model, check)
                    event = await anext(events)
                else:
                    answer = _wire.body_events(await resp.read(), replica.name, self._model, check)
                break
            except _Retry as retry:
                failure: _Retry | TierError = retry
            except TimeoutError as exc:
                self._give_up(replica, gen, resp)
                if not gen.stream:  # a long generation, not a broken replica: no ejection, no retry
                    replica.last_error = f"a whole answer took over {self._config.timeouts.total_s:g} s"
                    raise self._transport_error(replica, exc) from exc
                last = self._retry_or_raise(replica, tried, self._transport_error(replica, exc))
                continue
            except (UpstreamError, msgspec.DecodeError) as exc:
                failure = self._transport_error(replica, exc)
            except BaseException:
                self._give_up(replica, gen, resp)
                raise
            self._give_up(replica, gen, resp)
            last = self._retry_or_raise(replica, tried, failure)
        finished = not gen.stream  # a body is all here
        try:
            if finished:
                self._answered(replica, started)
                for event in answer:
                    yield event
                return
            while True:
                if isinstance(event, Finished):
                    finished = True
                    self._answered(replica, started)
                yield event
                if finished:
                    return
                event = await anext(events)
        except (TimeoutError, UpstreamError, msgspec.DecodeError) as exc:
            raise self._transport_error(replica, exc) from exc
        finally:
            if gen.stream:
                await events.aclose()
            # A stream left early closes its connection, which tells vLLM to stop generating.
            resp.release() if finished else resp.close()
            self._end(replica, gen)

    # -- internals ------------------------------------------------------------

    def _pick(self, gen: Generation, tried: set[str], last: TierError | None) -> Replica:
        picked = self._balancer.pick(
            self._replicas,
            cost=gen.cost,
            mean_cost=self._mean_cost,
            now=time.monotonic(),
            affinity=gen.affinity,
            exclude=tried,
        )
        if picked is None:
            raise last or TierUnavailable(self.name, self.state().detail or "no healthy replica")
        return picked[0]

    def _begin(self, replica: Replica, gen: Generation) -> None:
        replica.in_flight += 1
        replica.outstanding_cost += gen.cost
        self._mean_cost = 0.95 * self._mean_cost + 0.05 * gen.cost

    @staticmethod
    def _answered(replica: Replica, started: float) -> None:
        replica.succeeded()
        replica.observe(time.perf_counter() - started)

    def _give_up(self, replica: Replica, gen: Generation, resp: Response | None) -> None:
        """Done with a replica before the answer began."""
        if resp is not None:
            resp.close()
        self._end(replica, gen)

    def _end(self, replica: Replica, gen: Generation) -> None:
        replica.in_flight -= 1
        replica.finished_since_scrape += 1
        replica.outstanding_cost = max(0.0, replica.outstanding_cost - gen.cost)
        if replica.draining and replica.in_flight == 0:
            self._remove(replica)

    def _retry_or_raise(self, replica: Replica, tried: set[str], failure: _Retry | TierError) -> TierError:
        """Note the failure; return it if another replica may try, else raise it."""
        retry = failure if isinstance(failure, _Retry) else _Retry(failure, eject=True)
        error = retry.error
        c = self._config
        if retry.eject:
            ejections = replica.ejections
            replica.failed(error.message, eject_after=c.eject_after_failures, base_ejection_s=c.eject_s)
            if replica.ejections != ejections:
                self._tell(replica)
        else:
            replica.last_error = error.message
        tried.add(replica.name)
        if len(tried) > c.max_retries or not isinstance(error, TierUnavailable):
            raise error
        log.warning("cloud replica %s failed before the first byte (%s); retrying", replica.url, error)
        return error

    def _remove(self, replica: Replica) -> None:
        if replica in self._replicas:
            self._replicas.remove(replica)
            task = self._watchers.pop(replica.url, None)
            if task is not None:
                task.cancel()
            log.info("cloud replica %s drained and removed", replica.url)

    async def _post(
        self, replica: Replica, body: bytes, gen: Generation, deadline: float, *, whole: bool
    ) -> Response:
        """``whole``: the answer comes as one body, its headers only when it is done, so the wait for
        them is the request's deadline, not ``first_byte_s``."""
        if self._http is None:
            raise TierUnavailable(self.name, "not started")
        # The gateway's request id goes upstream, so vLLM's logs and ours can be joined.
        request_id = gen.request_id
        headers = {**_JSON_HEADERS, "X-Request-ID": request_id} if request_id else _JSON_HEADERS
        first_byte_s = self._config.timeouts.total_s if whole else None
        return await self._http.post(
            replica.url + _wire.path_of(gen), body, headers, deadline=deadline, first_byte_s=first_byte_s
        )

    def _status_error(self, replica: Replica, status: int, body: bytes) -> Exception:
        message = _wire.error_message(body)
        if 400 <= status < 500 and status not in (408, 429):
            return TierRejected(self.name, message)
        return _Retry(TierUnavailable(self.name, f"{replica.name} answered {status}: {message}"), eject=False)

    def _transport_error(self, replica: Replica, exc: BaseException) -> TierError:
        if isinstance(exc, TimeoutError):
            return TierTimeout(self.name, f"{replica.name} did not answer in time")
        if isinstance(exc, msgspec.DecodeError):
            return TierFailed(self.name, f"{replica.name} sent an unreadable answer: {exc}")
        return TierUnavailable(self.name, f"{replica.name}: {exc or type(exc).__name__}")

    async def _watch(self, replica: Replica) -> None:
        """Health every ``health_interval_s``, load every ``scrape_interval_s``."""
        c = self._config
        next_health = 0.0
        while True:
            now = time.monotonic()
            if now >= next_health:
                await self._check_health(replica)
                next_health = now + c.health_interval_s
            if replica.healthy:
                await self._probe.scrape(replica)
            await asyncio.sleep(min(c.scrape_interval_s, c.health_interval_s))

    async def _check_health(self, replica: Replica) -> None:
        was = replica.healthy
        ok, why, model = await self._probe.health(replica, model=not self._model)
        self._model = self._model or model
        replica.health_checked(ok, why)
        if replica.healthy != was:
            log.info("cloud replica %s is %s", replica.url, "healthy" if replica.healthy else "unhealthy")
            self._tell(replica)
