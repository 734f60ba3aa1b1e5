"""The gateway's database: tenants, keys, prices and the ledger, on SQLAlchemy 2.

SQLite in WAL mode in the data folder by default, PostgreSQL by configuration
(``storage.database_url``); the same tables and queries on both.  Every call
here is blocking: callers on the event loop run them in a thread.
"""

from gateway.accounts.storage._engine import SCHEMA_VERSION, open_database
from gateway.accounts.storage._lock import DataFolderInUse, DataFolderLock
from gateway.accounts.storage._schema import (
    answer_labels,
    api_keys,
    audit_head,
    audit_log,
    batch_files,
    batch_lines,
    batches,
    ledger,
    ledger_tags,
    metadata,
    policy_versions,
    prices,
    responses,
    tenant_policies,
    tenants,
)
from gateway.accounts.storage._segments import WriteAheadLog, read_lines, segment_number

__all__ = [
    "SCHEMA_VERSION",
    "DataFolderInUse",
    "DataFolderLock",
    "WriteAheadLog",
    "answer_labels",
    "api_keys",
    "audit_head",
    "audit_log",
    "batch_files",
    "batch_lines",
    "batches",
    "ledger",
    "ledger_tags",
    "metadata",
    "open_database",
    "policy_versions",
    "prices",
    "read_lines",
    "responses",
    "segment_number",
    "tenant_policies",
    "tenants",
]
