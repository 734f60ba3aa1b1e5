"""The composition root: every service of a running gateway, built once, in dependency order.

:func:`open_services` is an async context manager: it opens each part (the database, the
ledger, the tiers, …) right after the parts it needs, registers its close on an exit stack,
and yields one frozen :class:`Services`; leaving it closes everything in the reverse order.
Nothing is built per request, nothing is bound late, no object exists half-built:

    metrics, tracing                                   (made by the app, before it: middleware needs them)
    tiers behind admission gates · result cache store · circuit breakers (shared through Redis)
    database → tenants (first-run keys) → authenticator · rate limiter · policies · prices · ledger
    budgets (ledger + policies) → routing (policies + budgets + prices) → chat (tiers, cache, routing)
    media pipeline → the chat pipeline (auth, policies, limits, media, chat, recorder) · admin service
    start: tiers, media, shared state, SIGHUP reload, scaling signal
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import cast

import msgspec
from litestar.datastructures import State
from sqlalchemy import Engine

import cache
import router
from gateway.accounts import bootstrap
from gateway.accounts.admin import AdminService
from gateway.accounts.audit import SYSTEM_ACTOR, AuditTrail, Event
from gateway.accounts.batches import BatchStore, batch_store
from gateway.accounts.budgets import BudgetBook, KeyBudgets
from gateway.accounts.ledger import Ledger, PriceBook
from gateway.accounts.policies import PolicyBook, PolicyStore
from gateway.accounts.quality.feedback import Outcomes
from gateway.accounts.quality.labels import LabelStore
from gateway.accounts.quality.shadow import Shadows, embedding_similarity
from gateway.accounts.storage import open_database
from gateway.accounts.stored_responses import ResponseStore
from gateway.accounts.tenants import Authenticator, FailureThrottle, RateLimiter, TenantStore, make_limiter
from gateway.media import MediaMetrics, MediaPipeline, MediaTargets
from gateway.ops.activity import Activity
from gateway.ops.metrics import Metrics
from gateway.ops.observe import Observer, live_gauges
from gateway.ops.scaling import ReplicaSignal, run_signal
from gateway.ops.shared import SharedPool, SharedState, open_shared, pool_reloader
from gateway.ops.tracing import Tracing
from gateway.pipeline.admission import gates_for
from gateway.pipeline.answers.exact import AnswerCache
from gateway.pipeline.answers.semantic import semantic_cache
from gateway.pipeline.chat import ChatPipeline, ChatService
from gateway.pipeline.endpoints.embeddings.stages import EmbeddingPipeline, embedding_config
from gateway.pipeline.endpoints.hearing import Hearing
from gateway.pipeline.endpoints.speech import SpeechPipeline, speech_config
from gateway.pipeline.front import Front
from gateway.pipeline.record import Recorder
from gateway.pipeline.routing_service import RoutingService, tier_prices
from gateway.pipeline.tierset import Catalogue, TierSet
from gateway.settings import Settings
from tiers import Modality, ModelRegistry, Pool, Tier
from tiers.cloud import VLLMPool
from tiers.cloud.provider import ProviderConfig, ProviderTier
from tiers.edge import EdgeConfig, EdgeModel, EdgeRegistry
from tiers.embedding import make_embedder
from tiers.speech import Transcriber

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Services:
    """What the handlers use; each field is a started service."""

    settings: Settings
    observer: Observer  # metrics and tracing of requests
    tiers: TierSet  # the tiers by name, with their breakers
    pipeline: ChatPipeline  # a chat request's stages
    responses: ResponseStore  # stored responses (the Responses API)
    routing: RoutingService
    auth: Authenticator
    tenants: TenantStore
    policies: PolicyBook
    ledger: Ledger | None
    admin: AdminService
    audit: AuditTrail  # every change, hash-chained, in the ledger's database
    activity: Activity
    pool: Pool | None  # the cloud pool whose members operators change, if one is configured
    edge_models: ModelRegistry[EdgeModel] | None  # the edge's versioned models, if the edge runs here
    embeddings: EmbeddingPipeline | None = None  # POST /v1/embeddings, when [embedding] is enabled
    speech: SpeechPipeline | None = None  # POST /v1/audio/*, when [speech] and [media] are enabled
    outcomes: Outcomes | None = None  # answers kept for their labels (POST /v1/feedback)
    batches: BatchStore | None = None  # the Files and Batch APIs' store, when [batch] is enabled

    @property
    def metrics(self) -> Metrics:
        return self.observer.metrics

    @property
    def tracing(self) -> Tracing:
        return self.observer.tracing


def services_of(state: State) -> Services:
    """The one place the running services are read from the app's state (set by its lifespan)."""
    return cast(Services, state.services)


def build_tiers(settings: Settings) -> dict[str, Tier]:
    """Every configured tier by name: an in-process edge, a vLLM pool or a hosted model, as its kind says."""
    tiers: dict[str, Tier] = {}
    logs = str(settings.data_path / "logs")
    for name, config in settings.tier_configs().items():
        if isinstance(config, EdgeConfig):
            tiers[name] = EdgeRegistry(config, name=name)
        elif isinstance(config, ProviderConfig):
            tiers[name] = ProviderTier(name, config)
        else:
            tiers[name] = VLLMPool(config, name=name, log_dir=logs)
    return tiers


def _breakers(settings: Settings, metrics: Metrics, shared: SharedState | None) -> router.BreakerBoard:
    def changed(tier: str, modality: Modality, state: router.BreakerState) -> None:
        log.warning("circuit breaker %s/%s is now %s", tier, modality, state.value)
        metrics.breaker_transitions.labels(tier, str(modality), state.value).inc()
        if shared is not None:
            shared.breaker_changed(tier, modality, state)

    return router.BreakerBoard(settings.breakers, on_transition=changed)


async def _open_database(settings: Settings, stack: AsyncExitStack) -> tuple[Engine, TenantStore]:
    durable = settings.ledger.sync == "disk"
    engine = await asyncio.to_thread(
        functools.partial(
            open_database,
            settings.database_url,
            durable=durable,
            sqlite_cache_mib=settings.storage.sqlite_cache_mib,
            pool_size=settings.storage.pool_size,
        )
    )
    stack.callback(engine.dispose)
    store = TenantStore(engine, settings.limits.default)
    await bootstrap.first_run(store, settings.data_path)
    return engine, store


async def _started_auth(settings: Settings, store: TenantStore, stack: AsyncExitStack) -> Authenticator:
    given = settings.auth
    if given.open_mode:
        log.warning("auth.open_mode is on: no API keys are checked (local development only)")
    throttle = FailureThrottle(
        given.failed_auth_limit, given.failed_auth_window_s, max_addresses=given.failed_auth_addresses
    )
    auth = Authenticator(
        store,
        cache_s=given.key_cache_s,
        cache_entries=given.key_cache_entries,
        open_mode=given.open_mode,
        throttle=throttle,
        flush_s=given.last_used_flush_s,
    )
    await auth.start()
    stack.push_async_callback(auth.aclose)  # the keys' last use, written once more
    return auth


async def _started_ledger(
    settings: Settings, engine: Engine, stack: AsyncExitStack, metrics: Metrics
) -> Ledger | None:
    if not settings.ledger.enabled:
        return None
    ledger = Ledger(
        engine,
        settings.data_path / "ledger",
        flush_interval_s=settings.ledger.flush_interval_s,
        writer_process=settings.ledger.writer_process,
        sync=settings.ledger.sync,
        on_quarantine=metrics.ledger_quarantined.inc,
    )
    await ledger.start()
    stack.push_async_callback(ledger.aclose)
    return ledger


@asynccontextmanager
async def open_services(
    settings: Settings,
    observer: Observer,
    tiers: dict[str, Tier],
    reload_settings: Callable[[], Settings] | None = None,
) -> AsyncIterator[Services]:
    """Build and start every service; close them all, in reverse, on the way out.

    ``tiers`` are the tiers to serve (:func:`build_tiers` makes the configured ones).  With
    ``reload_settings``, SIGHUP re-reads the settings and applies the cloud pool's membership.
    """
    settings.data_path.mkdir(parents=True, exist_ok=True)
    metrics, tracing = observer.metrics, observer.tracing
    pool = next((t for t in tiers.values() if isinstance(t, Pool)), None)
    edge_models = next((t for t in tiers.values() if isinstance(t, ModelRegistry)), None)
    gates = gates_for(tiers, settings.admission, metrics)  # stage 7's, one per tier
    async with AsyncExitStack() as stack:
        stack.callback(tracing.shutdown)
        shared = open_shared(settings.shared, settings.breakers, settings.redis)
        breakers = _breakers(settings, metrics, shared)
        engine, store = await _open_database(settings, stack)
        auth = await _started_auth(settings, store, stack)
        limiter: RateLimiter = make_limiter(settings.limits.redis_url, settings.redis)
        stack.push_async_callback(limiter.aclose)
        policy_store = PolicyStore(engine, settings.policies.default, list(tiers))
        policies = PolicyBook(policy_store, refresh_s=settings.policies.refresh_s)
        await policies.start()
        stack.push_async_callback(policies.aclose)
        pricing = settings.pricing
        prices = await asyncio.to_thread(PriceBook.sync, engine, pricing.prices, pricing.counterfactual_tier)
        ledger = await _started_ledger(settings, engine, stack, metrics)
        budgets = BudgetBook(engine, policies.policy, settings.router.budget_refresh_s)
        await budgets.start()
        stack.push_async_callback(budgets.aclose)
        routing = RoutingService(
            settings.router,
            settings.routing,
            tier_prices(settings.pricing.prices, tiers),
            settings.data_path,
            policy_of=policies.policy,
            budgets=budgets,
            build_cache_dir=settings.build_cache_dir,
        )
        await routing.start()
        stack.push_async_callback(routing.aclose)
        store_ = None
        if settings.cache.enabled:
            store_ = cache.open_store(settings.cache, settings.data_path, settings.redis)
        aliases = {n: (a.model, a.strategy) for n, a in settings.model_aliases().items()}
        remote = frozenset(n for n, c in settings.tier_configs().items() if c.location == "remote")
        tier_set = TierSet(tiers, breakers, aliases, remote, gates)
        catalogue = Catalogue()  # each endpoint's models, for the error naming one at another endpoint
        catalogue.add("chat", lambda: tier_set.model_names)
        embedder = None
        if settings.embedding.enabled:
            embedder = make_embedder(
                embedding_config(settings.embedding, settings.build_cache_dir),
                observe=lambda rows, _: metrics.embedding_batch_rows.observe(rows),
            )
            stack.push_async_callback(embedder.aclose)
            await embedder.start()
        semantic = semantic_cache(
            settings.cache, store_, embedder, settings.data_path, settings.build_cache_dir, settings.redis
        )
        if semantic is not None:
            await semantic.start()
            stack.push_async_callback(semantic.aclose)
        activity = Activity(settings.admin_ui.recent_decisions)
        recorder = Recorder(limiter, ledger, prices, metrics, tracing, activity)
        labels = LabelStore(engine)  # answers' labels, beside the ledger
        stack.push_async_callback(labels.aclose)
        outcomes = Outcomes(routing.label, record=labels.add, settings=settings.feedback)  # kept for labels
        shadows = Shadows(  # off unless a tenant's policy turns them on
            tier_set.__getitem__,
            tier_set.queued,
            lambda rid, good: outcomes.outcome(rid, good, "shadow"),
            similarity=embedding_similarity(embedder) if embedder is not None else None,
        )
        stack.push_async_callback(shadows.aclose)
        chat = ChatService(
            tier_set,
            metrics,
            tracing,
            rule=settings.routing,
            answers=AnswerCache(settings.cache, store_, settings.routing, metrics),
            semantic=semantic,
            routing=routing,
            recorder=recorder,
            fail_instead_of_degrade=settings.degradation.fail_instead,
            outcomes=outcomes,
            shadows=shadows,
        )
        stack.push_async_callback(chat.aclose)
        transcriber = None
        if settings.speech.enabled and settings.media.enabled:  # it hears audio the decode pool has read
            transcriber = Transcriber(speech_config(settings.speech, settings.build_cache_dir))
            stack.push_async_callback(transcriber.aclose)
        media = None
        if settings.media.enabled:
            # videos' tracks are taken out for the transcriber only where there is one to hear them
            hears_video = transcriber is not None and transcriber.available and settings.speech.video_audio
            targets = MediaTargets.of([t.capabilities for t in tiers.values()], video_audio=hears_video)
            media = MediaPipeline(settings.media, settings.data_path, targets, metrics=MediaMetrics(metrics))
        key_budgets = KeyBudgets(engine, settings.router.budget_refresh_s)  # keys' own budgets
        batches = batch_store(engine, settings.data_path, settings.batch) if settings.batch.enabled else None
        front = Front(auth, policies, limiter, recorder, tracing, metrics, key_budgets)  # every endpoint's
        speech = hearing = None
        if transcriber is not None and media is not None:
            await transcriber.start()
            if transcriber.available:
                speech = SpeechPipeline(transcriber, front, chat.ending, media, catalogue)
                catalogue.add("speech", lambda: transcriber.names if transcriber.available else ())
                hearing = Hearing(transcriber, tier_set)
        pipeline = ChatPipeline(chat, front, tracing, media, hearing, catalogue)
        # Written ahead where the ledger's rows are too (SQLite, ledger.sync = "os"): the same promise.
        write_ahead = settings.data_path / "responses-wal" if settings.ledger.sync == "os" else None
        responses = ResponseStore(engine, settings.responses, write_ahead)
        await responses.start()
        stack.push_async_callback(responses.aclose)
        embeddings = None
        if embedder is not None:
            embeddings = EmbeddingPipeline(
                embedder, front, chat.ending, tracing, metrics, store_, settings.cache.ttl_s, catalogue
            )
            catalogue.add("embedding", lambda: embeddings.model_names if embeddings is not None else ())
            stack.push_async_callback(embeddings.aclose)  # its held cache writes, before the store closes
        await _start_tiers(tiers, stack)
        if media is not None:
            await media.start()
            stack.push_async_callback(media.aclose)
        trail = AuditTrail(engine)
        urls_of = None if reload_settings is None else (lambda: reload_settings().cloud.urls)
        reload = pool_reloader(urls_of, pool)  # another gateway's reload: recorded where it was made
        if shared is not None:
            shared.attach(breakers, pool, reload)
            await shared.start()
            stack.push_async_callback(shared.aclose)
        if reload_settings is not None and pool is not None:
            loop = asyncio.get_running_loop()
            on_sighup = pool_reloader(urls_of, pool, functools.partial(_reloaded, trail))
            loop.add_signal_handler(signal.SIGHUP, _also(on_sighup, shared.reloaded if shared else None))
            stack.callback(loop.remove_signal_handler, signal.SIGHUP)
        if settings.scaling.enabled and "cloud" in tiers:
            scaling = asyncio.create_task(
                run_signal(
                    ReplicaSignal(settings.scaling), tiers["cloud"], metrics, gates.by_tier.get("cloud")
                ),
                name="scaling",
            )
            stack.callback(scaling.cancel)
        metrics.on_scrape(live_gauges(tiers, tier_set.breaker_states, gates.by_tier))
        if ledger is not None:
            metrics.on_scrape(lambda m: m.ledger_backlog.set(ledger.backlog))
        log.info("tiergate ready to accept requests; tiers: %s", tier_set.states())
        yield Services(
            settings=settings,
            observer=observer,
            tiers=tier_set,
            pipeline=pipeline,
            responses=responses,
            routing=routing,
            auth=auth,
            tenants=store,
            policies=policies,
            ledger=ledger,
            admin=AdminService(store, auth, list(tiers), trail),
            audit=trail,
            activity=activity,
            pool=SharedPool(pool, shared) if shared is not None and pool is not None else pool,
            edge_models=edge_models,
            embeddings=embeddings,
            speech=speech,
            outcomes=outcomes,
            batches=batches,
        )
        log.info("tiergate stopping its tiers")


async def _start_tiers(tiers: dict[str, Tier], stack: AsyncExitStack) -> None:
    async def close_all() -> None:
        await asyncio.gather(*(tier.aclose() for tier in tiers.values()), return_exceptions=True)

    stack.push_async_callback(close_all)
    await asyncio.gather(*(tier.start() for tier in tiers.values()))


def _reloaded(trail: AuditTrail, before: list[str], after: list[str]) -> None:
    """A SIGHUP's change of the pool's members, in the audit trail."""
    old, new = {"cloud.urls": before}, {"cloud.urls": after}
    change = Event(
        actor=SYSTEM_ACTOR, action="settings.reloaded", object_type="settings", object_id="cloud.urls"
    )
    trail.record(msgspec.structs.replace(change, before=old, after=new))


def _also(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    def both() -> None:
        first()
        if then is not None:
            then()

    return both


__all__ = ["Services", "build_tiers", "open_services", "services_of"]
