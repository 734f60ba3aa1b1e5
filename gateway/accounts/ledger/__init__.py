"""The cost ledger: one durable row per answered request, prices, and cost reports."""

from gateway.accounts.ledger._pricing import DEFAULT_PRICES, NANO, Charge, Price, PriceBook, PricingSettings
from gateway.accounts.ledger._reports import FORMATS, GROUPS, ReportQuery, cost_report, report_csv
from gateway.accounts.ledger._row import LedgerRow, new_entry_id
from gateway.accounts.ledger._tags import decode_tags, encode_tags, parse_header, request_tags
from gateway.accounts.ledger._tags import valid_key as valid_tag_key
from gateway.accounts.ledger._wal import WriteAheadLog, read_segment
from gateway.accounts.ledger._writer import Ledger, insert_rows

__all__ = [
    "DEFAULT_PRICES",
    "FORMATS",
    "GROUPS",
    "NANO",
    "Charge",
    "Ledger",
    "LedgerRow",
    "Price",
    "PriceBook",
    "PricingSettings",
    "ReportQuery",
    "WriteAheadLog",
    "cost_report",
    "decode_tags",
    "encode_tags",
    "insert_rows",
    "new_entry_id",
    "parse_header",
    "read_segment",
    "report_csv",
    "request_tags",
    "valid_tag_key",
]
