"""Settings: typed, loaded once from defaults, a TOML file and ``TIERGATE_*`` variables.

Precedence, lowest first: built-in defaults, the TOML file, the environment.
An environment variable names a setting by its path with ``__`` between the
parts, e.g. ``TIERGATE_SERVER__PORT=9000`` or ``TIERGATE_CLOUD__URLS=http://a:8000,http://b:8000``
(lists are comma separated or JSON).  Unknown settings are an error, not a
silent no-op.
"""

from __future__ import annotations

import ipaddress
import json
import os
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from cache import CacheConfig, RedisPolicy
from gateway.accounts.ledger import PricingSettings
from gateway.accounts.quality.settings import FeedbackSettings
from gateway.accounts.stored_responses import ResponseSettings
from gateway.accounts.tenants import LimitSettings
from gateway.media import MediaSettings
from gateway.ops.clients import proxy_networks
from gateway.ops.httpguard import HttpSettings
from gateway.ops.observe import ObservabilitySettings
from gateway.ops.scaling import ScalingSettings
from gateway.ops.shared import SharedSettings
from gateway.pipeline.admission import AdmissionSettings
from gateway.pipeline.routing_service import RouterSettings
from router import AutoRule, BreakerConfig, TenantPolicy
from tiers import split_cpus, usable_cpus
from tiers.cloud import (
    DEFAULT_VLLM_CUDA_PYTHON,
    DEFAULT_VLLM_PYTHON,
    DEFAULT_VLM_DIR,
    CloudConfig,
    LocalServer,
)
from tiers.cloud.provider import ProviderConfig
from tiers.edge import DEFAULT_ONNX_MODEL_DIR, EdgeConfig
from tiers.embedding import EmbeddingConfig
from tiers.speech import SpeechConfig

ENV_PREFIX = "TIERGATE_"


class SettingsError(ValueError):
    """The configuration cannot be used; the message says which setting and why."""


class ServerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 16 * 1024 * 1024
    # On SIGTERM: stop accepting, let in-flight requests finish for this long.
    shutdown_grace_s: float = 30.0
    log_level: str = "info"
    access_log: bool = False
    # TLS: PEM files of the certificate (with its chain) and its private key; both empty: plain HTTP.
    tls_cert: str = ""
    tls_key: str = ""
    # Reverse proxies (addresses or networks) whose X-Forwarded-For and X-Forwarded-Proto are believed:
    # the client's address (failed-sign-in throttling) and scheme (the admin cookie's Secure flag).
    trusted_proxies: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise SettingsError("server.tls_cert and server.tls_key go together: set both or neither")
        proxy_networks(self.trusted_proxies)  # ValueError names a bad entry

    @property
    def on_loopback(self) -> bool:
        """Whether ``host`` is a loopback address (reachable from this machine only)."""
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:  # a host name: it may resolve to anything
            return False


class DegradationSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What happens to a request whose image/audio/video no tier can take now (breakers open)."""

    # False: serve it text-only, marked (X-Tiergate-Degraded); True: answer 503 instead.
    fail_instead: bool = False


class AuthSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Local development only: no keys at all, every request is the `default` tenant's.
    open_mode: bool = False
    # `tiergate serve` refuses open mode on a non-loopback server.host (anyone who reaches the port
    # would be the `default` tenant) unless this says it is meant (--allow-open-mode-on-network).
    allow_open_mode_on_network: bool = False
    # Failed authentications (unknown or wrong keys, failed admin sign-ins) per client address: past
    # failed_auth_limit within failed_auth_window_s, that address gets 429 with Retry-After; 0: off.
    failed_auth_limit: int = 20
    failed_auth_window_s: float = 60.0
    # Addresses whose failures are remembered (the least recently failed forgotten first): ~0.9 KB
    # each, ~90 MB when full (docs/reliability.md, "Memory bounds").
    failed_auth_addresses: int = 100_000
    # How long a key looked up in the database is trusted before it is looked up again
    # (a key revoked by another process stops working within this time; the admin API's
    # revocation is immediate in the process that served it).
    key_cache_s: float = 2.0
    # Key ids remembered so (unknown ones too, so a flood of made-up keys is not a database query
    # each); past this many the memory is emptied and filled again.
    key_cache_entries: int = 100_000
    # Keys' last use is kept in memory and written in one transaction this often (and at shutdown):
    # one write per key per interval, never a write per request.
    last_used_flush_s: float = 30.0


class StorageSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # SQLAlchemy URL of the tenants/keys/ledger database; empty: SQLite (WAL) at
    # <data_dir>/tiergate.db. PostgreSQL: postgresql+psycopg://user@host:port/db
    database_url: str = ""
    # Connections kept open to it (the ledger's loader, tenants, labels, reports), and twice as many more
    # for a burst; with SQLite each holds up to sqlite_cache_mib of pages (SQLite's default is 2).
    pool_size: int = 5
    sqlite_cache_mib: int = 2


class LedgerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    # Rows are made durable in a local write-ahead file before the response ends, then
    # moved into the database in batches this often.
    flush_interval_s: float = 0.5
    # With sync = "disk": fsync the write-ahead file in a small child process (true) or in a
    # thread of the gateway (false; costs the event loop a GIL hand-off per write).
    writer_process: bool = True
    # When a response may end: "os", once the event loop has written its row to the write-ahead
    # file (a few µs; it survives the gateway being killed, even with SIGKILL; the disk follows
    # when the rows reach the database, within flush_interval_s), or "disk", once it is also
    # fsynced (survives a power cut; adds a disk sync, ~1-3 ms, to every request).
    sync: Literal["os", "disk"] = "os"


class PolicySettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Tenant routing policies (edited through /admin/api/.../policy; stored in the database)."""

    # Another gateway's policy edits are seen within this long (this gateway's own: at once).
    refresh_s: float = 1.0
    # The policy of tenants without one of their own, until an admin edits it (/admin/api/policies/default).
    default: TenantPolicy = msgspec.field(default_factory=TenantPolicy)


class AdminUISettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The operator's web page at /admin/ (sign in with an admin key)."""

    enabled: bool = True
    # A session ends after this long without a request, and in any case after session_max_s.
    session_idle_s: float = 3600.0
    session_max_s: float = 43200.0
    # How often the live view refreshes itself.
    refresh_s: float = 3.0
    # Recent route decisions kept in memory for the live view (this process only).
    recent_decisions: int = 500


class EdgeTier(EdgeConfig, frozen=True, tag="edge", tag_field="kind"):
    """One more in-process tier (``kind = "edge"``): the settings of ``[edge]``, under its own name."""


class CloudTier(CloudConfig, frozen=True, tag="cloud", tag_field="kind"):
    """One more pool of vLLM servers (``kind = "cloud"``): the settings of ``[cloud]``, under its own name.
    It starts no local server: list its servers in ``urls``."""


class HostedTier(ProviderConfig, frozen=True, tag="provider", tag_field="kind"):
    """A hosted provider's model (``kind = "provider"``): OpenAI, Azure OpenAI, an OpenAI-compatible
    vendor or Anthropic, one account and model per tier (docs/providers.md)."""


# A tier's name: what clients put in ``model`` to pin it, and what policies and prices name.
TierName = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]
RESERVED_TIER_NAMES = frozenset({"edge", "cloud", "tiergate-auto", "embedding", "embedding-vllm", "speech"})


class Alias(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A model name clients may use (``[aliases]``): it stands for ``model`` (``tiergate-auto`` or a
    tier), routed with ``strategy`` instead of the tenant policy's when one is given."""

    model: str = "tiergate-auto"
    strategy: str = ""


AliasName = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:/-]+$")]


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Everything the gateway writes (logs, and later caches, ledger, predictor).
    data_dir: str = "~/.local/share/tiergate"
    # Build outputs of scripts/setup.sh (vLLM's environment, converted models).
    build_cache_dir: str = "~/.cache/tiergate"
    server: ServerSettings = msgspec.field(default_factory=ServerSettings)
    http: HttpSettings = msgspec.field(default_factory=HttpSettings)
    edge: EdgeConfig = msgspec.field(default_factory=EdgeConfig)
    cloud: CloudConfig = msgspec.field(default_factory=CloudConfig)
    embedding: EmbeddingConfig = msgspec.field(default_factory=EmbeddingConfig)  # POST /v1/embeddings
    speech: SpeechConfig = msgspec.field(default_factory=SpeechConfig)  # POST /v1/audio/transcriptions
    # More tiers, by name, beside edge and cloud (the embedded default's two): [tiers.<name>] with
    # kind = "edge" or "cloud" and that section's settings, or kind = "provider" (a hosted model).
    # Route to them like to any other tier.
    tiers: dict[TierName, EdgeTier | CloudTier | HostedTier] = msgspec.field(default_factory=dict)
    # Model names clients already use, e.g. "gpt-4o-mini" = "edge", or
    # "fast" = { model = "tiergate-auto", strategy = "latency" }; listed by /v1/models.
    aliases: dict[AliasName, str | Alias] = msgspec.field(default_factory=dict)
    routing: AutoRule = msgspec.field(default_factory=AutoRule)
    admission: AdmissionSettings = msgspec.field(default_factory=AdmissionSettings)
    cache: CacheConfig = msgspec.field(default_factory=CacheConfig)
    breakers: BreakerConfig = msgspec.field(default_factory=BreakerConfig)
    degradation: DegradationSettings = msgspec.field(default_factory=DegradationSettings)
    media: MediaSettings = msgspec.field(default_factory=MediaSettings)

    auth: AuthSettings = msgspec.field(default_factory=AuthSettings)
    limits: LimitSettings = msgspec.field(default_factory=LimitSettings)
    storage: StorageSettings = msgspec.field(default_factory=StorageSettings)
    shared: SharedSettings = msgspec.field(default_factory=SharedSettings)
    # How every Redis client (cache, limits, shared) connects, loses Redis and finds it again.
    redis: RedisPolicy = msgspec.field(default_factory=RedisPolicy)
    ledger: LedgerSettings = msgspec.field(default_factory=LedgerSettings)
    pricing: PricingSettings = msgspec.field(default_factory=PricingSettings)
    observability: ObservabilitySettings = msgspec.field(default_factory=ObservabilitySettings)
    scaling: ScalingSettings = msgspec.field(default_factory=ScalingSettings)
    admin_ui: AdminUISettings = msgspec.field(default_factory=AdminUISettings)
    policies: PolicySettings = msgspec.field(default_factory=PolicySettings)
    responses: ResponseSettings = msgspec.field(default_factory=ResponseSettings)
    router: RouterSettings = msgspec.field(default_factory=RouterSettings)
    feedback: FeedbackSettings = msgspec.field(default_factory=FeedbackSettings)  # answers kept for labels

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()

    @property
    def database_url(self) -> str:
        return self.storage.database_url or f"sqlite:///{self.data_path / 'tiergate.db'}"

    def __post_init__(self) -> None:
        taken = RESERVED_TIER_NAMES & set(self.tiers)
        if taken:
            raise SettingsError(f"tiers.{min(taken)}: that name is taken (a built-in tier or tiergate-auto)")
        served = {"tiergate-auto", "edge", "cloud", *self.tiers}
        for name, alias in self.model_aliases().items():
            if name in served:
                raise SettingsError(f"aliases.{name}: a tier or tiergate-auto has that name")
            if alias.model not in served:
                raise SettingsError(f"aliases.{name}: {alias.model!r} is neither tiergate-auto nor a tier")

    def model_aliases(self) -> dict[str, Alias]:
        """Every alias in its long form."""
        return {n: Alias(model=a) if isinstance(a, str) else a for n, a in self.aliases.items()}

    def edge_config(self, edge: EdgeConfig | None = None) -> EdgeConfig:
        """An edge tier's settings (``[edge]``'s by default) with an empty ONNX folder filled from the
        build cache; ``[edge]`` also gets its share of the CPUs when vLLM runs here too."""
        cpus = self._cpu_shares()[0] if edge is None else []
        edge = self.edge if edge is None else edge
        cache = Path(self.build_cache_dir).expanduser()
        return msgspec.structs.replace(
            edge,
            onnx_model_dir=edge.onnx_model_dir or str(cache / DEFAULT_ONNX_MODEL_DIR),
            cpus=edge.cpus or cpus,
        )

    def tier_configs(self) -> dict[str, EdgeConfig | CloudConfig | ProviderConfig]:
        """Every enabled tier's settings by name, paths filled in: edge, cloud, then [tiers.*]."""
        out: dict[str, EdgeConfig | CloudConfig | ProviderConfig] = {}
        if self.edge.enabled:
            out["edge"] = self.edge_config()
        if self.cloud.enabled:
            out["cloud"] = msgspec.structs.replace(self.cloud, local=self.local_vllm())
        for name, tier in self.tiers.items():
            if isinstance(tier, EdgeTier) and tier.enabled:
                out[name] = self.edge_config(tier)
            elif isinstance(tier, CloudTier) and tier.enabled:
                out[name] = msgspec.structs.replace(
                    tier, local=msgspec.structs.replace(tier.local, enabled=False)
                )
            elif isinstance(tier, HostedTier) and tier.enabled:
                out[name] = tier
        return out

    def local_vllm(self) -> LocalServer:
        """The local vLLM server's settings with empty paths filled from the build cache."""
        local = self.cloud.local
        cache = Path(self.build_cache_dir).expanduser()
        return msgspec.structs.replace(
            local,
            python=local.python or default_vllm_python(cache),
            model_dir=local.model_dir or str(cache / DEFAULT_VLM_DIR),
            cpus=local.cpus or self._cpu_shares()[1],
        )

    def _cpu_shares(self) -> tuple[list[int], list[int]]:
        """The edge's and the local vLLM server's CPUs when both run here (tiers/_cpus.py), else none;
        a list set by hand for one of them leaves the other the rest."""
        local = self.cloud.local
        both = self.edge.enabled and self.cloud.enabled and not self.cloud.urls and local.enabled
        if not both or not local.split_cpus:
            return [], []
        usable = usable_cpus()
        if self.edge.cpus or local.cpus:  # one set by hand: the other engine gets the rest
            edge = self.edge.cpus or [c for c in usable if c not in local.cpus]
            return edge, local.cpus or [c for c in usable if c not in edge]
        edge, server = split_cpus(usable)
        return (edge, server) if edge != server else ([], [])


def default_vllm_python(cache: Path) -> str:
    """vLLM's CUDA build where scripts/setup.sh made one (a box with an NVIDIA GPU), else its CPU build."""
    cuda = cache / DEFAULT_VLLM_CUDA_PYTHON
    return str(cuda if cuda.exists() else cache / DEFAULT_VLLM_PYTHON)


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build :class:`Settings`; ``overrides`` are dotted paths such as ``server.port``."""
    raw: dict[str, Any] = {}
    if config_file is not None:
        try:
            raw = tomllib.loads(Path(config_file).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"cannot read config file {config_file}: {exc}") from exc
    for key, value in (os.environ if environ is None else environ).items():
        if key.startswith(ENV_PREFIX) and key != ENV_PREFIX + "CONFIG":
            path = key[len(ENV_PREFIX) :].lower().split("__")
            _assign(raw, path, _parse_env(path, value))
    for dotted, value in overrides.items():
        if value is not None:
            _assign(raw, dotted.split("."), value)
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid setting: {exc}") from exc


def _assign(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise SettingsError(f"setting {'.'.join(path)} is inside a value that is not a table")
    node[path[-1]] = value


def _parse_env(path: list[str], value: str) -> Any:
    """Environment values are strings; lists and tables may be JSON, lists also comma separated."""
    if value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{ENV_PREFIX}{'__'.join(path).upper()}: invalid JSON: {exc}") from exc
    if _is_list_setting(path):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _is_list_setting(path: list[str]) -> bool:
    node: Any = Settings
    for part in path:
        hints = typing.get_type_hints(node) if isinstance(node, type) else {}
        if part not in hints:
            return False
        node = hints[part]
    return typing.get_origin(node) is list
