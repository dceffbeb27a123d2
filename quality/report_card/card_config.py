"""Settings of a report-card run (:mod:`quality.report_card.card`); only pydantic here, since the
CLI builds its flags from this model when it prints ``--help``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The share of equivalent correct answers a verifier must pay, unless the domain declares its own
# bar (``gate_thresholds={"min_recall": ...}``): published rule verifiers sit near 86%, and every
# miss trains the policy away from a right answer.
DEFAULT_MIN_RECALL = 0.99
# Below this share of mutants killed, a domain's hidden tests are called weak (a warning on the
# card, with the surviving mutants named per item; not a block: a survivor may be equivalent).
DEFAULT_MIN_KILL_RATE = 0.90


class CardConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    items: int = Field(8, description="eval items per domain for the oracle, nop, recall and fixed-family checks")
    search_items: int = Field(4, description="eval items per domain the hack search attacks (its budget per item "
                                             "is quality.report_card.hack_search's default)")
    mutation_items: int = Field(0, description="items whose reference solution is mutated, for domains with hidden "
                                               "tests (code, terminal); 0: every item")
    hack_search: bool = Field(True, description="run the budgeted hack search (off: the fixed families only)")
    mutation: bool = Field(True, description="measure the hidden tests' mutation kill rate where a domain has them")
    workers: int = Field(2, description="domains carded in parallel (processes); 1 runs in this process")
    record: bool = Field(True, description="write the cards to lake table report_cards (the dashboard's Report "
                                           "cards page, the nightly asset and training read the newest)")

    @field_validator("items", "search_items")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be >= 1, got {value}; a card needs items to score")
        return value

    @field_validator("mutation_items")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be >= 0 (0: every item), got {value}")
        return value

    @field_validator("workers")
    @classmethod
    def _workers(cls, value: int) -> int:
        if not 1 <= value <= 64:
            raise ValueError(f"must be between 1 and 64, got {value}; on this machine 2 (one per core) is right")
        return value
