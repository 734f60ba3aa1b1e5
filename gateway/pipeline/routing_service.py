"""The learned router inside the gateway: policies and budgets in, decisions out, and learning.

:class:`RoutingService` holds the pure :class:`router.Router` and the :class:`router.Learner`,
and does what neither may: it reads the tenant's policy (from the policy book, in memory) and
budget spend (from the ledger, refreshed in the background), loads and saves the predictors in
``<data_dir>/router/predictor.json`` (with their version and error metrics) and the
difficulty classifier from ``difficulty.json`` (else the built-in default, trained once and kept in
the build cache: see :func:`builtin_difficulty`), and refits the predictors in a worker process so
the event loop never waits on a fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import inspect
import json
import logging
import multiprocessing
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

import router
from gateway.accounts.budgets import BudgetBook
from gateway.ops.background import exit_with_parent
from tiers import Tier

log = logging.getLogger(__name__)


class RouterSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The learned router (policies choose the strategy; this tunes how it learns)."""

    # Share of learned-strategy requests sent to another able tier, so every tier stays measured.
    exploration: float = 0.02
    directory: str = ""  # empty: <data_dir>/router
    save_interval_s: float = 30.0
    budget_refresh_s: float = 2.0
    predictor: router.PredictorConfig = msgspec.field(default_factory=router.PredictorConfig)
    # The quality model: when learned acceptability replaces the declared one (router/_learning/quality.py).
    quality: router.QualityConfig = msgspec.field(default_factory=router.QualityConfig)


PREDICTOR_FILE = "predictor.json"
DIFFICULTY_FILE = "difficulty.json"
# Observations of requests served wait in a queue for the learner (:meth:`RoutingService.observe`):
# at most this many (~2 s of a busy gateway's requests; past it the oldest are dropped) ...
OBSERVATIONS_HELD = 10_000
# ... and are folded in beside the request path this long after the first of a batch arrives,
FOLD_AFTER_S = 0.05
# ... this many at a time between requests.
FOLD_CHUNK = 256


def tier_prices(prices: Sequence[Any], tiers: Mapping[str, Tier]) -> dict[str, router.TierPrice]:
    """Each tier's price: the row for its model if there is one, else its ``*`` row."""
    out = {}
    for name, tier in tiers.items():
        rows = [p for p in prices if p.tier == name]
        model = tier.capabilities.model
        row = next((p for p in rows if p.model == model), None) or next(
            (p for p in rows if p.model == "*"), None
        )
        if row is not None:
            out[name] = router.TierPrice(
                row.prompt_per_1k,
                row.completion_per_1k,
                row.per_image,
                row.per_media_second,
                row.per_gpu_second,
            )
    return out


def write_json(path: Path, value: Any) -> None:
    """Write atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.encode(value))
    os.replace(tmp, path)


def load_difficulty(directory: Path, builtin_cache: Path | None = None) -> router.DifficultyModel:
    path = directory / DIFFICULTY_FILE
    if path.exists():
        try:
            return msgspec.json.decode(path.read_bytes(), type=router.DifficultyModel)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.error("router: cannot read %s (%s); using the built-in difficulty model", path, exc)
    return builtin_difficulty(builtin_cache)


def builtin_difficulty(cache: Path | None) -> router.DifficultyModel:
    """The built-in difficulty model. Training it imports scikit-learn and fits a classifier: seconds of
    CPU at every start (a fifth of a gateway's start-up on two cores). So it is trained once and kept in
    ``cache`` under a name keyed by what decides it (the code that makes the examples and features, and
    the versions of the libraries that fit it). A cache that cannot be read or written costs only the
    training."""
    if cache is None:
        return router.builtin_model()
    path = cache / f"difficulty-builtin-{_builtin_key()}.json"
    with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
        return msgspec.json.decode(path.read_bytes(), type=router.DifficultyModel)
    model = router.builtin_model()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache, prefix=f".{path.name}.", delete=False) as tmp:
            tmp.write(msgspec.json.encode(model))
        os.replace(tmp.name, path)  # two gateways starting at once each write a whole file
    except OSError as exc:
        log.info("router: cannot keep the built-in difficulty model in %s (%s)", cache, exc)
    return model


def _builtin_key() -> str:
    digest = hashlib.sha256()
    for obj in (router.DifficultyModel, router.Features):  # their modules: the examples, the features
        digest.update(Path(inspect.getsourcefile(obj) or "").read_bytes())
    for dist in ("scikit-learn", "scipy", "numpy"):
        digest.update(f"{dist} {importlib.metadata.version(dist)}\n".encode())
    return digest.hexdigest()[:16]


class RoutingService:
    def __init__(
        self,
        settings: RouterSettings,
        rule: router.AutoRule,
        prices: Mapping[str, router.TierPrice],
        data_path: Path,
        *,
        policy_of: Callable[[str], router.TenantPolicy] = lambda _tenant: router.DEFAULT_POLICY,
        budgets: BudgetBook | None = None,
        build_cache_dir: str | None = None,
    ) -> None:
        """``policy_of`` reads a tenant's policy (the policy book, in memory); ``budgets`` its spend;
        ``<build_cache_dir>/router/`` keeps the built-in difficulty model once trained
        (:func:`builtin_difficulty`)."""
        self.settings = settings
        self._builtin_cache = Path(build_cache_dir).expanduser() / "router" if build_cache_dir else None
        self.directory = Path(settings.directory).expanduser() if settings.directory else data_path / "router"
        self.router = router.Router(rule)
        self.learner = router.Learner(
            prices, exploration=settings.exploration, predictor=settings.predictor, quality=settings.quality
        )
        self._policy_of = policy_of
        self._budgets = budgets
        self._pool: ProcessPoolExecutor | None = None
        self._refitting: asyncio.Task[None] | None = None
        self._saver: asyncio.Task[None] | None = None
        self._difficulty_mtime = 0.0
        self._loaded = False
        self._last_refit = -float("inf")
        # Observations waiting for the learner (:meth:`observe`), and the task that folds them.
        self._queued: deque[router.Observed] = deque(maxlen=OBSERVATIONS_HELD)
        self._labels: deque[router.Label] = deque(maxlen=OBSERVATIONS_HELD)  # answers' labels, the same way
        self.dropped = 0  # observations dropped from a full queue
        self._arrived = asyncio.Event()
        self._folder: asyncio.Task[None] | None = None

    def _all_fitted(self) -> bool:
        """Whether every tier with enough requests has had its first fit (that one never waits)."""
        least = self.settings.predictor.min_samples
        return all(
            p.coefficients is not None for p in self.learner.predictors.values() if len(p.window) >= least
        )

    def policy(self, tenant: str) -> router.TenantPolicy:
        return self._policy_of(tenant)

    # -- the request path (no I/O) ------------------------------------------------------------

    def decide(self, views: Sequence[router.TierView], features: router.Features) -> router.Decision:
        """Route a request: the learner's snapshot, the pure decision, the work booked."""
        policy = self._policy_of(features.tenant)
        if features.strategy:  # the model alias the client named routes its own way
            policy = msgspec.structs.replace(policy, strategy=features.strategy)
        spend, tag = None, None
        if self._budgets is not None and (policy.budget.amount_usd > 0 or policy.tag_budgets):
            policy, spend, tag = self._budgets.governing(features.tenant, policy, features.tags)
        snapshot = self.learner.snapshot(features, views, policy, spend)
        try:
            decision = self.router.decide(features, views, policy, snapshot)
        except router.BudgetExhausted as exc:
            if tag is None:
                raise
            raise router.BudgetExhausted(
                f"{exc}: the budget of requests tagged {tag}", exc.retry_after_s
            ) from exc
        self.learner.routed(decision)
        return decision

    def observe(
        self,
        decision: router.Decision,
        tier: str,
        ttft_s: float | None,
        total_s: float,
        completion_tokens: int | None = None,
        prompt_tokens: int | None = None,
    ) -> None:
        """A request ended at ``tier``: out of the book of work in hand now (the next decision
        reads it), and queued for the learner, which folds the queue in batches beside the
        request path (:meth:`_folding`). The queue holds :data:`OBSERVATIONS_HELD`; past that
        the oldest is dropped and counted in :attr:`dropped`."""
        self.learner.finished(decision, tier)
        queued = self._queued
        if len(queued) == OBSERVATIONS_HELD:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("router: the learner is behind; dropping the oldest observations")
        queued.append((decision, tier, ttft_s, total_s, completion_tokens, prompt_tokens))
        self._arrived.set()

    def label(self, tenant: str, tier: str, keys: router.QualityKeys, good: bool) -> None:
        """An answer's label (gateway/accounts/quality/feedback.py): queued for the quality model and folded
        with the observations, beside the request path."""
        self._labels.append((tenant, tier, keys, good, time.time()))
        self._arrived.set()

    def fold_now(self) -> int:
        """Fold every queued observation into the learner now, then start a refit if one is due;
        how many were folded.  (The background fold does this every :data:`FOLD_AFTER_S`.)"""
        folded = self._fold_all()
        self._refit_if_due()
        return folded

    def _fold_all(self) -> int:
        return self._fold(max(len(self._queued), len(self._labels)))

    def _fold(self, most: int) -> int:
        queued = self._queued
        batch = [queued.popleft() for _ in range(min(most, len(queued)))]
        self.learner.fold(batch)
        labels = self._labels
        self.learner.label([labels.popleft() for _ in range(min(most, len(labels)))])
        return len(batch)

    async def _folding(self) -> None:
        """Beside the request path: wait for observations, let a batch gather for
        :data:`FOLD_AFTER_S`, fold it (:data:`FOLD_CHUNK` at a time, letting requests run between
        chunks), then start a refit if one is due."""
        while True:
            await self._arrived.wait()
            await asyncio.sleep(FOLD_AFTER_S)
            self._arrived.clear()
            try:
                while self._queued or self._labels:
                    self._fold(FOLD_CHUNK)
                    if self._queued or self._labels:
                        await asyncio.sleep(0)
                self._refit_if_due()
            except Exception:
                log.exception("router: folding observations into the learner failed")

    def _refit_if_due(self) -> None:
        if not self._loaded or (self._refitting is not None and not self._refitting.done()):
            return
        now = time.monotonic()
        if now - self._last_refit < self.settings.predictor.refit_interval_s and self._all_fitted():
            return
        due = self.learner.due()
        if due:
            self._last_refit = now
            self._refitting = asyncio.get_running_loop().create_task(self._refit(due), name="router-refit")

    def report(self) -> dict[str, Any]:
        """The learner's report (:meth:`router.Learner.report`) with what is queued folded first,
        and the queue's figures."""
        self._fold_all()
        return {**self.learner.report(), "observations": {"dropped": self.dropped}}

    def quality(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Per tenant and tier: labels, the share good, per hour (the labels queued folded first)."""
        self._fold_all()
        return self.learner.quality.report(tenant)

    # -- learning in the background -------------------------------------------------------------

    async def _refit(self, due: list[tuple[str, list[list[Any]]]]) -> None:
        loop = asyncio.get_running_loop()
        if self._pool is None:
            # A fresh interpreter (spawn), not a fork of this threaded process.
            self._pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=exit_with_parent,
                initargs=(os.getpid(),),
            )
        config = msgspec.to_builtins(self.settings.predictor)
        for tier, window in due:
            started = time.monotonic()
            try:
                fitted = await loop.run_in_executor(self._pool, router.fit_tier, window, config)
            except Exception:
                log.exception("router: refitting %s failed; keeping its current model", tier)
                continue
            self.learner.adopt(tier, fitted)
            log.info(
                "router: refit %s on %d requests in %.1f s, held-out MAPE total %.0f%%",
                tier,
                len(window),
                time.monotonic() - started,
                100 * fitted["metrics"].get("total_holdout_mape", float("nan")),
            )

    async def refit_now(self) -> dict[str, Any]:
        """Refit every tier with enough observations, wait for it, save; the snapshot after."""
        self._fold_all()
        if self._refitting is not None:
            with contextlib.suppress(Exception):
                await self._refitting
        for predictor in self.learner.predictors.values():
            predictor.since_refit = self.settings.predictor.refit_every
        due = self.learner.due()
        if due:
            self._refitting = asyncio.get_running_loop().create_task(self._refit(due))
            await self._refitting
        await self.save()
        return self.report()

    # -- persistence ----------------------------------------------------------------------------

    async def start(self) -> None:
        path = self.directory / PREDICTOR_FILE
        if path.exists():
            try:
                data = await asyncio.to_thread(lambda: json.loads(path.read_text()))
                self.learner.load(data)
                log.info("router: loaded predictors v%d from %s", self.learner.version, path)
            except (OSError, ValueError, msgspec.ValidationError) as exc:
                log.error("router: cannot load %s (%s); starting from the prior", path, exc)
        self._loaded = True
        self.learner.difficulty = await asyncio.to_thread(
            load_difficulty, self.directory, self._builtin_cache
        )
        self._difficulty_mtime = self._mtime(self.directory / DIFFICULTY_FILE)
        self._saver = asyncio.create_task(self._save_periodically(), name="router-save")
        self._folder = asyncio.create_task(self._folding(), name="router-fold")

    async def _load_difficulty(self) -> router.DifficultyModel:
        return await asyncio.to_thread(load_difficulty, self.directory, self._builtin_cache)

    @staticmethod
    def _mtime(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    async def save(self) -> None:
        await asyncio.to_thread(write_json, self.directory / PREDICTOR_FILE, self.learner.dump())

    async def _save_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.save_interval_s)
            try:
                await self.save()
                mtime = self._mtime(self.directory / DIFFICULTY_FILE)
                if mtime != self._difficulty_mtime:  # `tiergate router train-difficulty` wrote a new one
                    self.learner.difficulty = await asyncio.to_thread(
                        load_difficulty, self.directory, self._builtin_cache
                    )
                    self._difficulty_mtime = mtime
                    log.info("router: loaded the difficulty model trained %s", time.ctime(mtime))
            except Exception:
                log.exception("router: saving the predictors failed")

    async def aclose(self) -> None:
        if self._folder is not None:
            self._folder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._folder
        try:
            self._fold_all()  # what is queued is learned, and saved below
        except Exception:
            log.exception("router: folding observations into the learner failed")
        for task in (self._saver, self._refitting):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._loaded:
            try:
                await self.save()
            except Exception:
                log.exception("router: saving the predictors failed")
        if self._pool is not None:  # wait for the worker to exit: it must not outlive the gateway
            await asyncio.to_thread(self._pool.shutdown, True, cancel_futures=True)
