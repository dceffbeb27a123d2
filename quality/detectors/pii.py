"""``pii``: e-mail addresses, phone numbers, payment card numbers (Luhn-checked) and IBANs
(mod-97-checked), in the prompt or the answer.

E-mail and phone patterns flag directly. Card and IBAN patterns only nominate candidates; the
checksum runs on the candidates, so the long digit strings of arithmetic tasks (which pass Luhn
one time in ten) are not flagged unless they also look like a card: a known issuer prefix and a
card length. Phone numbers need an international prefix (``+44 20 7946 0958``, ``0044 ...``) or
the North-American shape (``(415) 555-2671``, ``415-555-2671``): bare digit runs (binary strings,
digit grids) are numbers, not phones, in this data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from quality import reasons
from quality.detectors.base import any_match, shared_scan, verify_candidates

FIELDS = ("prompt", "answer")

EMAIL = r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
PHONE = (
    r"(?:^|[^\w+])(?:\+[1-9]\d{0,2}[ .\-]?|00[1-9]\d{0,2}[ .\-])(?:\(\d{1,4}\)[ .\-]?)?\d{1,4}(?:[ .\-]?\d{2,4}){2,4}\b"
    r"|\(\d{3}\) ?\d{3}[ .\-]\d{4}\b"
    r"|\b\d{3}[.\-]\d{3}[.\-]\d{4}\b"
)
# 13-19 digits, bare or in groups of 4 (Amex 4-6-5): digit grids ("7 7 7 7 ...") are not cards
CARD_CANDIDATE = r"\b(?:\d{13,19}|\d{4}(?:[ \-]\d{4}){2}[ \-]\d{1,7}|\d{4}[ \-]\d{6}[ \-]\d{5})\b"
IBAN_CANDIDATE = r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"

for _pattern in (EMAIL, PHONE, CARD_CANDIDATE, IBAN_CANDIDATE):
    shared_scan(_pattern)

# Issuer prefixes and lengths (Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay, Maestro).
_CARD_SHAPES = re.compile(
    r"^(?:4\d{12}(?:\d{3}){0,2}|5[1-5]\d{14}|2(?:2[2-9]|[3-6]\d|7[01])\d{13}|2720\d{12}"
    r"|3[47]\d{13}|6(?:011|5\d\d)\d{12,15}|35(?:2[89]|[3-8]\d)\d{12,15}|3(?:0[0-5]|[68]\d)\d{11,16}"
    r"|62\d{14,17}|(?:5018|5020|5038|6304|6759|676[1-3])\d{8,15})$"
)
_IBAN_LENGTHS = {  # ISO 13616 lengths of common countries; others accept 15..34
    "DE": 22, "GB": 22, "FR": 27, "ES": 24, "IT": 27, "NL": 18, "BE": 16, "CH": 21, "AT": 20,
    "IE": 22, "PT": 25, "PL": 28, "SE": 24, "NO": 15, "DK": 18, "FI": 18, "LU": 20,
}


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def is_card_number(text: str) -> bool:
    digits = re.sub(r"[ \-]", "", text)
    return bool(_CARD_SHAPES.match(digits)) and luhn_ok(digits)


def is_iban(text: str) -> bool:
    iban = text.replace(" ", "")
    expected = _IBAN_LENGTHS.get(iban[:2])
    if (expected and len(iban) != expected) or not 15 <= len(iban) <= 34:
        return False
    moved = iban[4:] + iban[:4]
    numeric = "".join(str(int(c, 36)) for c in moved)
    return int(numeric) % 97 == 1


@dataclass(frozen=True)
class PiiDetector:
    code: str = reasons.PII
    fields: tuple[str, ...] = FIELDS

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        direct = any_match(frame, self.fields, (EMAIL, PHONE), ctx)
        cards = verify_candidates(frame, self.fields, CARD_CANDIDATE, is_card_number, ctx)
        ibans = verify_candidates(frame, self.fields, IBAN_CANDIDATE, is_iban, ctx)
        return pl.Series(self.code, direct | cards | ibans)
