"""Row-level detectors, one module per reason code. Each exposes a detector class with ``code``
and a vectorised ``flags(frame, ctx=None) -> pl.Series[bool]`` (see :mod:`.base`).

Adding a detector: write ``quality/detectors/<name>.py`` with such a class, add it to
:data:`RULE_BASED` or :data:`MODEL_BASED` below, and add a table of true and false positives to
``tests/quality/test_detectors.py``. :func:`quality.row_gates.default_row_gates` wraps them.
"""

from __future__ import annotations

from quality.detectors.answer_leak import AnswerLeakDetector
from quality.detectors.base import Detector
from quality.detectors.contamination import ContaminationDetector
from quality.detectors.duplicate import DuplicateDetector
from quality.detectors.harmful import HarmfulDetector
from quality.detectors.near_duplicate import NearDuplicateDetector
from quality.detectors.pii import PiiDetector
from quality.detectors.prompt_injection import PromptInjectionDetector
from quality.detectors.secret import SecretDetector
from quality.detectors.toxic import ToxicDetector


def rule_based() -> list[Detector]:
    """Regex/checksum/hash detectors: vectorised, no model (the >= 500k rows/s set)."""
    return [AnswerLeakDetector(), PiiDetector(), SecretDetector(), PromptInjectionDetector(),
            DuplicateDetector(), NearDuplicateDetector(), ContaminationDetector()]


def model_based() -> list[Detector]:
    """Detectors that score text with a trained model (measured separately)."""
    return [ToxicDetector(), HarmfulDetector()]


__all__ = ["Detector", "rule_based", "model_based", "AnswerLeakDetector", "ContaminationDetector",
           "DuplicateDetector", "HarmfulDetector", "NearDuplicateDetector", "PiiDetector",
           "PromptInjectionDetector", "SecretDetector", "ToxicDetector"]
