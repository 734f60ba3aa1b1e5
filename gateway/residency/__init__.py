"""Residency rules: detectors for sensitive data in a request's text (``detect``), and what a tenant's
rules make of a match (``rules``): keep it on local tiers, redact it for remote ones, or refuse it."""

from gateway.residency.rules import NOTHING, Redaction, Rule, Verdict, compiled, restored, scan

__all__ = ["NOTHING", "Redaction", "Rule", "Verdict", "compiled", "restored", "scan"]
