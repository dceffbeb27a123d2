"""Text normalisation shared by dedup and contamination: what makes two strings "the same item"."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_WS = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Unicode-compatible, case-folded, whitespace-collapsed form of ``text``."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def content_hash(prompt: str, answer: str) -> str:
    """Identity of a row's content: equal for rows that differ only in case or whitespace."""
    joined = normalize_text(prompt) + "\x1f" + normalize_text(answer)
    return hashlib.sha256(joined.encode()).hexdigest()[:32]


def stable_id(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:16]


def estimate_tokens(text: str) -> int:
    """A cheap upper-leaning token estimate for a byte-level BPE (~3 UTF-8 bytes per token).

    Real English runs ~4 bytes per token on SmolLM2's tokenizer; digits and symbols run closer to
    1-2. Dividing by 3 errs towards flagging, which is the safe side for a context-length gate.
    """
    return (len(text.encode("utf-8")) + 2) // 3
