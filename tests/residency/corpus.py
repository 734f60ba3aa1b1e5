"""A labelled corpus for the residency detectors: sensitive values and look-alikes that are not
(order numbers, dates, UUIDs, hashes, ISBNs, tracking numbers, prices, versions, checksums that fail),
each set in several sentences.  ``CORPUS`` is a list of (text, the detectors that must fire)."""

from __future__ import annotations

SENSITIVE: dict[str, list[str]] = {
    "email": [
        "anna.schmidt@example.com",
        "j.doe+billing@mail.example.co.uk",
        "support@tiergate.io",
        "first_last@sub.domain.example.org",
        "x99@example.net",
        "Maria.Garcia@empresa.es",
        "ops-team@corp.example",
        "li.wei@example.cn",
    ],
    "phone": [
        "+49 30 1234567",
        "(212) 736-5000",
        "+44 20 7946 0958",
        "+33 1 42 68 53 00",
        "+1 415-555-2671",
        "212.736.5000",
        "+81 3-1234-5678",
        "+34 912 345 678",
    ],
    "iban": [
        "DE89 3704 0044 0532 0130 00",
        "GB82WEST12345698765432",
        "FR1420041010050500013M02606",
        "NL91ABNA0417164300",
        "ES9121000418450200051332",
        "IT60X0542811101000000123456",
        "CH9300762011623852957",
        "AT611904300234573201",
        "PL61109010140000071219812874",
    ],
    "card": [
        "4111 1111 1111 1111",
        "5500-0000-0000-0004",
        "340000000000009",
        "6011000000000004",
        "4012888888881881",
        "5105 1051 0510 5100",
        "378282246310005",
        "3530111333300000",
    ],
    "national_id": [
        "536-22-1234",
        "078-05-1121",
        "36574261809",
        "12345678Z",
        "X1234567L",
        "2 94 03 75 120 005 91",
        "RSSMRA85T10A562S",
        "AB 12 34 56 C",
    ],
    "secret": [
        "sk-proj-4fX9aQ2mZ7LwP0sK3dR8tY1uV6bN5cE2",
        "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R",
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-2048-9876543210-AbCdEfGhIjKlMnOp",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        "glpat-xY7_aB3cD9eF1gH5iJ2k",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
        "-----BEGIN RSA PRIVATE KEY-----",
        "hf_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY9",
    ],
}

LOOK_ALIKES = [
    "Order #4821-7730-1193",
    "ORD-20240115-0042",
    "2024-01-15",
    "15/01/2024 14:30",
    "550e8400-e29b-41d4-a716-446655440000",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
    "ISBN 978-3-16-148410-0",
    "version 1.22.3",
    "192.168.10.254",
    "$1,234.56",
    "1Z999AA10123456784",
    "ZIP 94103",
    "INV-000123",
    "JIRA-1234",
    "meet @ 5pm",
    "user@localhost",
    "4111 1111 1111 1112",
    "DE89 3704 0044 0532 0130 01",
    "000-12-3456",
    "room 1204, floor 12",
    "12 345 678 items",
    "the year 1999",
    "build 20240115093000",
    "ext. 4412",
    "temperature 21.5 C",
    "lot 7734-A",
    "SKU 400-112-9987",
    "commit 3f2a9c1",
    "pi is 3.14159265358979",
    "a very long ordinary word like internationalization",
    "the_snake_case_identifier_for_configuration_values",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGH",
    "/usr/local/lib/python3.11/site-packages/tiergate",
    "https://example.com/docs/getting-started/installation",
    "tracking 9400111899223856928499",
    "passport pending, call back tomorrow",
    "account number unknown",
    "1234",
    "+1",
]

TEMPLATES = [
    "{}",
    "Please check this: {}.",
    "The customer wrote that {} is the one to use, thanks!",
    "Note for the file -- {} -- end of note",
]


def corpus() -> list[tuple[str, frozenset[str]]]:
    out = []
    for template in TEMPLATES:
        for detector, values in SENSITIVE.items():
            out += [(template.format(v), frozenset({detector})) for v in values]
        out += [(template.format(v), frozenset()) for v in LOOK_ALIKES]
    return out


CORPUS = corpus()
