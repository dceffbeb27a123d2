"""Quarantine reason codes (the ingest contract, README "Ingest and quarantine"). Every quarantined row carries one or more of these."""

MALFORMED = "malformed"  # not a JSON object, undecodable, or a field of the wrong type
MISSING_FIELD = "missing_field"
EMPTY_FIELD = "empty_field"
TOO_LONG = "too_long"
DUPLICATE = "duplicate"
NEAR_DUPLICATE = "near_duplicate"
PII = "pii"
SECRET = "secret"
TOXIC = "toxic"
HARMFUL = "harmful"
PROMPT_INJECTION = "prompt_injection"
ANSWER_LEAK = "answer_leak"
CONTAMINATED = "contaminated"
DIFFICULTY_OUT_OF_BAND = "difficulty_out_of_band"

ALL_REASONS = (
    MALFORMED, MISSING_FIELD, EMPTY_FIELD, TOO_LONG, DUPLICATE, NEAR_DUPLICATE, PII, SECRET, TOXIC,
    HARMFUL, PROMPT_INJECTION, ANSWER_LEAK, CONTAMINATED, DIFFICULTY_OUT_OF_BAND,
)
