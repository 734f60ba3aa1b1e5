"""Table definitions (SQLAlchemy Core): one ``MetaData`` for every table the gateway owns."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("applied_at", Float, nullable=False),
)

tenants = Table(
    "tenants",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    # Per-minute limits; NULL: the configured default (limits.default).
    Column("requests_per_min", Integer),
    Column("tokens_per_min", Integer),
    Column("images_per_min", Integer),
    Column("audio_per_min", Integer),
    Column("video_per_min", Integer),
    Column("video_seconds_per_min", Integer),  # schema v2
    Column("audio_seconds_per_min", Integer),  # schema v2
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(32), primary_key=True),  # the public part of the key: tg_<id>_<secret>
    Column("tenant_id", Integer, ForeignKey("tenants.id")),  # NULL for admin keys
    Column("role", String(16), nullable=False),  # "tenant" | "admin"
    Column("key_hash", String(64), nullable=False),  # sha256 hex of the whole key
    Column("name", String(128), nullable=False, default=""),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float),
    # Schema v6: the key's own limits (NULL: none; gateway/accounts/tenants/_keylimits.py).
    Column("budget_day_usd", Float),
    Column("budget_month_usd", Float),
    Column("tiers", Text),  # comma list of the tiers it may use
    Column("models", Text),  # comma list of the model names it may ask for
    Column("expires_at", Float),
    Column("requests_per_min", Integer),
    Column("tokens_per_min", Integer),
    Column("last_used", Float),  # written in batches (gateway/accounts/tenants/_auth.py)
    Column("previous_hash", String(64)),  # a rotated key's old hash, taken until previous_until
    Column("previous_until", Float),
)

prices = Table(
    "prices",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tier", String(64), nullable=False),
    Column("model", String(256), nullable=False),
    Column("prompt_per_1k", Float, nullable=False),
    Column("completion_per_1k", Float, nullable=False),
    Column("per_image", Float, nullable=False),
    Column("per_media_second", Float, nullable=False),
    Column("per_gpu_second", Float, nullable=False),
    # schema v7: prompt-cache reads and writes; NULL: at prompt_per_1k
    Column("cached_prompt_per_1k", Float),
    Column("cache_write_per_1k", Float),
    Column("effective_from", Float, nullable=False),
    UniqueConstraint("tier", "model", "effective_from"),
)

ledger = Table(
    "ledger",
    metadata,
    Column("entry_id", String(32), primary_key=True),  # made by the gateway; replay is idempotent
    Column("request_id", String(128), nullable=False, index=True),
    Column("tenant_id", Integer, nullable=False),
    Column("key_id", String(32), nullable=False),
    Column("ts", Float, nullable=False),  # epoch seconds when the request arrived
    Column("day", String(10), nullable=False),  # UTC YYYY-MM-DD of ts, for grouping on any database
    Column("model_asked", String(256), nullable=False),
    Column("tier", String(64), nullable=False),  # "" when no tier served
    Column("model_used", String(256), nullable=False),
    Column("route_reason", Text, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("images", Integer, nullable=False),
    Column("audio", Integer, nullable=False),
    Column("video", Integer, nullable=False),
    Column("ttft_ms", Float),
    Column("total_ms", Float, nullable=False),
    Column("cache_hit", Boolean, nullable=False),
    Column("degraded", Boolean, nullable=False),
    Column("status", Integer, nullable=False),
    Column("error", Text),
    Column("price_id", Integer),
    Column("cost_nusd", BigInteger, nullable=False),  # cost in nano-USD: sums are exact
    Column("counterfactual_nusd", BigInteger, nullable=False),  # the same on the counterfactual tier
    Column("metadata", Text),  # schema v3: the request's metadata (JSON)
    Column("tags", Text),  # schema v4: the row's cost tags (JSON, keys sorted); also in ledger_tags
    Column("endpoint", String(32), nullable=False, server_default="chat"),  # schema v5: chat, embeddings
    # schema v7: of prompt_tokens, those read from and written to a provider's prompt cache
    Column("cached_tokens", Integer, nullable=False, server_default="0"),
    Column("cache_write_tokens", Integer, nullable=False, server_default="0"),
    Index("ix_ledger_tenant_ts", "tenant_id", "ts"),
)

# Schema v4: one row per (ledger row, tag), for reports and budgets by tag. A key appears at most
# once per ledger row, so grouping the ledger by one key's value (an outer join) counts each row
# once: the groups add up to the tenant's total exactly. tenant_id and ts are the ledger row's,
# so a filter by tag is one index range.
ledger_tags = Table(
    "ledger_tags",
    metadata,
    Column("entry_id", String(32), primary_key=True),
    Column("key", String(64), primary_key=True),
    Column("value", String(128), nullable=False),
    Column("tenant_id", Integer, nullable=False),
    Column("ts", Float, nullable=False),
    Index("ix_ledger_tags_key_value", "tenant_id", "key", "value", "ts"),
)

# Tenant routing policies (router.TenantPolicy as JSON): the current one per tenant ("*": the
# default for tenants without one), and every version ever set, for history and rollback.
tenant_policies = Table(
    "tenant_policies",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("policy", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("updated_by", String(128), nullable=False),
)

policy_versions = Table(
    "policy_versions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),  # grows with every change anywhere
    Column("tenant", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("action", String(16), nullable=False),  # "set" | "rollback"
    Column("before", Text),  # the policy replaced (JSON); NULL for a tenant's first
    Column("after", Text, nullable=False),
    Column("changed_by", String(128), nullable=False),
    Column("changed_at", Float, nullable=False),
    UniqueConstraint("tenant", "version"),
)

# Stored responses (the Responses API's store): the response as answered, the response it continues,
# and the messages it added to the conversation (gateway/accounts/stored_responses.py).
responses = Table(
    "responses",
    metadata,
    Column("id", String(40), primary_key=True),  # resp_ + 32 hex digits
    Column("tenant", String(64), nullable=False),
    Column("parent", String(40)),  # the previous_response_id it continues, if any
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),
    Column("size", Integer, nullable=False),  # bytes of body + added
    Column("body", LargeBinary, nullable=False),
    Column("added", LargeBinary, nullable=False),  # JSON chat messages: this turn's input and answer
    Index("ix_responses_tenant_expires", "tenant", "expires_at"),
)


# Answers' quality labels (gateway/accounts/quality/labels.py): one per answer, by the request id its
# ledger row has, so a report joins them; new in a database, create_all makes it (no migration step).
answer_labels = Table(
    "answer_labels",
    metadata,
    Column("request_id", String(128), primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("tier", String(64), nullable=False),
    Column("good", Boolean, nullable=False),
    Column("source", String(16), nullable=False),  # feedback, re-ask, abandoned, cut short, no such tool
    Column("note", Text),
    Column("labelled_at", Float, nullable=False),
    Index("ix_answer_labels_tenant_at", "tenant", "labelled_at"),
)


# Schema v8: the audit trail (gateway/accounts/audit/): one row per change or sign-in, append-only,
# each row's hash the SHA-256 of the previous row's hash and its own canonical content, numbered
# without gaps by seq (a deleted row leaves a hole that `tiergate audit verify` names).
audit_log = Table(
    "audit_log",
    metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=False),  # 1, 2, 3, ... never reused
    Column("at", String(32), nullable=False),  # UTC, YYYY-MM-DDTHH:MM:SS.ffffffZ: sorts as text
    Column("actor", String(256), nullable=False),  # a person's subject/email, a key's id, cli:<user>
    Column("actor_kind", String(16), nullable=False),  # person | key | cli | system
    Column("address", String(64)),  # the client's address, when it came over HTTP
    Column("action", String(64), nullable=False),  # e.g. key.created, policy.rolled_back, sign_in.failed
    Column("object_type", String(32), nullable=False),
    Column("object_id", String(256), nullable=False),
    Column("tenant", String(64)),  # the tenant the object belongs to, for a tenant admin's view
    Column("before", Text),  # canonical JSON, secrets stripped; NULL: nothing before
    Column("after", Text),  # canonical JSON, secrets stripped; NULL: nothing after
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Index("ix_audit_log_at", "at"),
    Index("ix_audit_log_object", "object_type", "object_id"),
)

# The chain's head: one row (id 1) with the last seq and hash. Appends lock it (PostgreSQL: a row
# lock; SQLite: the database's write lock) so that gateways sharing one database never fork the
# chain, and verify compares it with the last row, so a deleted last row is found too.
audit_head = Table(
    "audit_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("seq", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
)

# The Files and Batch APIs (gateway/accounts/batches/): new tables, so create_all makes them (no
# migration step).  A file's bytes are on the data folder (``path``); its row says whose it is.
batch_files = Table(
    "batch_files",
    metadata,
    Column("id", String(40), primary_key=True),  # file- + 24 hex digits
    Column("tenant", String(64), nullable=False),
    Column("purpose", String(32), nullable=False),  # batch (uploaded), batch_output (written)
    Column("filename", String(256), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("lines", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("path", Text, nullable=False),  # relative to the data folder
    Index("ix_batch_files_tenant_created", "tenant", "created_at"),
)

batches = Table(
    "batches",
    metadata,
    Column("id", String(40), primary_key=True),  # batch_ + 24 hex digits
    Column("tenant", String(64), nullable=False),
    Column("key_id", String(32), nullable=False),  # the key that created it: its lines run as it
    Column("endpoint", String(32), nullable=False),
    Column("input_file_id", String(40), nullable=False),
    Column("status", String(16), nullable=False),
    Column("metadata", Text),  # JSON
    Column("errors", Text),  # JSON list of {code, message, line, param}: why it failed validation
    Column("output_file_id", String(40)),
    Column("error_file_id", String(40)),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("in_progress_at", Float),
    Column("finalizing_at", Float),
    Column("completed_at", Float),
    Column("failed_at", Float),
    Column("expired_at", Float),
    Column("cancelling_at", Float),
    Column("cancelled_at", Float),
    Column("total", Integer, nullable=False, server_default="0"),
    Index("ix_batches_tenant_created", "tenant", "created_at"),
    Index("ix_batches_status", "status"),
)

# One row per input line, keyed by (batch, line number): a line is claimed (state "running", with
# the claim's owner and time: an expired claim is taken again), then done once, with what it
# answered.  Its ledger row's entry id is derived from the same key, so running it again after a
# crash bills it once (gateway/pipeline/record.py).
batch_lines = Table(
    "batch_lines",
    metadata,
    Column("batch_id", String(40), primary_key=True),
    Column("line", Integer, primary_key=True),  # 1-based, as an editor numbers them
    Column("custom_id", String(512)),
    Column("body", Text),  # the line's request body (JSON); NULL for a line refused at validation
    Column("state", String(8), nullable=False),  # pending, running, done
    Column("owner", String(32)),
    Column("claimed_at", Float),
    Column("status_code", Integer),  # the endpoint's HTTP status; NULL: the line never ran
    Column("response", Text),  # the endpoint's JSON answer, or its error body
    Column("error", Text),  # JSON {code, message, line} for a line that failed
    Column("done_at", Float),
    Index("ix_batch_lines_state", "batch_id", "state"),
)
