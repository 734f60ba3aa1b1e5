"""Detectors for sensitive data in text: where each match is (spans), never what it is beyond that.

Each detector finds candidates with a regular expression and keeps those a kept library confirms:
IBANs and national ids by their checksums (python-stdnum), payment cards by the Luhn checksum and an
issuer prefix, phone numbers by libphonenumber's rules (phonenumbers), secrets by a known key prefix
or a long high-entropy token. A tenant's own patterns run on RE2, which matches in linear time, so a
pattern cannot stall the gateway. The look-alikes they must leave alone (order numbers, dates, UUIDs,
hashes, ISBNs) are in tests/residency/corpus.py, with the precision and recall they reach.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator

import phonenumbers
import re2
from stdnum import iban, luhn
from stdnum.de import idnr
from stdnum.es import dni, nie
from stdnum.fr import nir
from stdnum.it import codicefiscale
from stdnum.us import ssn

Span = tuple[int, int]
Detect = Callable[[str], Iterator[Span]]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_PHONE = re.compile(r"(?<![\w+/.-])\+?\(?\d[\d ().-]{6,17}\d(?![\w/-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
_SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")
_DIGITS11 = re.compile(r"(?<![\d-])\d{11}(?![\d-])")  # German tax id (IdNr)
_DNI = re.compile(r"\b[XYZ]?\d{7,8}-?[A-Z]\b")  # Spanish DNI / NIE
_NIR = re.compile(r"\b[12] ?\d{2} ?\d{2} ?(?:\d{2}|2[AB]) ?\d{3} ?\d{3} ?\d{2}\b")  # French NIR
_FISCAL = re.compile(r"\b[A-Z]{6}\d{2}[A-EHLMPRST]\d{2}[A-Z]\d{3}[A-Z]\b")  # Italian codice fiscale
_NINO = re.compile(
    r"\b(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"
)
_KEY_PREFIXES = re.compile(
    r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|sk_live_[A-Za-z0-9]{20,}|rk_live_[A-Za-z0-9]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|tg_[a-z0-9]{6,}_[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{30,})"
    r"|-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----"
)
_TOKEN = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_=-]{32,}(?![A-Za-z0-9+/_=-])")
ENTROPY_BITS = 4.3  # per character: random base64 has ~6, English words ~3.5-4, hex digests ~3.9
_CARD_PREFIX = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[068]|6(?:011|5|4[4-9]|22)|35)")


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def email(text: str) -> Iterator[Span]:
    if "@" in text:
        for m in _EMAIL.finditer(text):
            yield m.span()


def phone(text: str) -> Iterator[Span]:
    for m in _PHONE.finditer(text):
        candidate = m.group()
        digits = _digits(candidate)
        if not 8 <= len(digits) <= 15 or candidate.count("-") > 3:
            continue
        region = None if candidate.startswith("+") else "US"
        try:
            number = phonenumbers.parse(candidate, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            yield m.span()


def iban_number(text: str) -> Iterator[Span]:
    for m in _IBAN.finditer(text):
        if iban.is_valid(m.group()):
            yield m.span()


def card(text: str) -> Iterator[Span]:
    for m in _CARD.finditer(text):
        digits = _digits(m.group())
        if 13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) and luhn.is_valid(digits):
            yield m.span()


def national_id(text: str) -> Iterator[Span]:
    checks: list[tuple[re.Pattern[str], Callable[[str], bool]]] = [
        (_SSN, ssn.is_valid),
        (_DIGITS11, idnr.is_valid),
        (_DNI, lambda s: dni.is_valid(s) or nie.is_valid(s)),
        (_NIR, nir.is_valid),
        (_FISCAL, codicefiscale.is_valid),
        (_NINO, lambda s: True),  # the UK's has no checksum: its letters' rules are in the pattern
    ]
    for pattern, valid in checks:
        for m in pattern.finditer(text):
            if valid(m.group()):
                yield m.span()


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())


def _mixed(token: str) -> bool:
    return (
        any(c.isdigit() for c in token)
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
    )


def secret(text: str) -> Iterator[Span]:
    for m in _KEY_PREFIXES.finditer(text):
        yield m.span()
    for m in _TOKEN.finditer(text):
        token = m.group()
        mixed = (
            any(c.isdigit() for c in token)
            and any(c.isupper() for c in token)
            and any(c.islower() for c in token)
        )
        if mixed and _entropy(token) >= ENTROPY_BITS:
            yield m.span()


def pattern(expression: str) -> Detect:
    """A tenant's own pattern (RE2 syntax)."""
    compiled = re2.compile(expression)

    def detect(text: str) -> Iterator[Span]:
        for m in compiled.finditer(text):
            if m.end() > m.start():
                yield m.span()

    return detect


DETECTORS: dict[str, Detect] = {
    "email": email,
    "phone": phone,
    "iban": iban_number,
    "card": card,
    "national_id": national_id,
    "secret": secret,
}
