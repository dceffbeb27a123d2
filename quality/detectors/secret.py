"""``secret``: credentials in the prompt or answer.

Flags directly: AWS access key ids (``AKIA``/``ASIA`` + 16), AWS secret keys next to an ``aws``
/``secret`` name, PEM private key blocks, GitHub (``ghp_``... and ``github_pat_``), Slack
(``xox?-``), Stripe (``sk_live_``/``rk_test_``...), Google API keys (``AIza``...) and JWTs.
Generic ``key=``/``token=``/``password:`` assignments are candidates only: the value must be long
(>= 16 chars), mix character classes and have high Shannon entropy (>= 3.5 bits/char), so
``token = tokenizer.encode(text)`` or ``password: hunter2`` examples in code prompts pass.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import polars as pl

from quality import reasons
from quality.detectors.base import any_match, shared_scan, verify_candidates

FIELDS = ("prompt", "answer")

KNOWN_TOKENS = (
    r"\b(?:AKIA|ASIA|AROA|AIDA)[0-9A-Z]{16}\b"
    r"|(?i:aws).{0,30}(?i:secret|private).{0,20}[:=]\s*['\"]?[A-Za-z0-9/+]{40}\b"
    r"|-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----"
    r"|\bgh[pousr]_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{40,}\b"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}\b"
    r"|\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b"
    r"|\bAIza[0-9A-Za-z_\-]{35}\b"
    r"|\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"
)
ASSIGNMENT = (
    r"(?i)(?:^|[^A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|apikey|secret(?:[_-]?key)?|access[_-]?key|auth[_-]?token|token|"
    r"passw(?:or)?d|pwd|client[_-]?secret|private[_-]?key)\b['\"]?\s*[:=]\s*['\"]?[A-Za-z0-9_\-/+=.#!@$%^&*]{16,}"
)
shared_scan(KNOWN_TOKENS)
shared_scan(ASSIGNMENT)
_VALUE = re.compile(r"[:=]\s*['\"]?([A-Za-z0-9_\-/+=.#!@$%^&*]{16,})")
MIN_ENTROPY_BITS = 3.5


def shannon_entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


def is_high_entropy_value(assignment: str) -> bool:
    found = _VALUE.search(assignment)
    if not found:
        return False
    value = found.group(1)
    classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"\d"))
    # identifiers such as tokenizer.encode or my_secret_name_here are words, not keys
    wordy = re.fullmatch(r"[A-Za-z_.\-]+", value) is not None
    return not wordy and classes >= 2 and shannon_entropy(value) >= MIN_ENTROPY_BITS


@dataclass(frozen=True)
class SecretDetector:
    code: str = reasons.SECRET
    fields: tuple[str, ...] = FIELDS

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        direct = any_match(frame, self.fields, (KNOWN_TOKENS,), ctx)
        generic = verify_candidates(frame, self.fields, ASSIGNMENT, is_high_entropy_value, ctx)
        return pl.Series(self.code, direct | generic)
