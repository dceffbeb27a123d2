"""Settings of a reward-attack run (:mod:`quality.reward_attacks`); only pydantic here, since the
CLI builds its flags from this model when it prints ``--help``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class AttackConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    items: int = Field(8, description="eval items per domain to attack (each family's candidates are scored on "
                                      "every item whose reference answer scores 1.0)")
    record: bool = Field(True, description="write the results to lake table reward_attacks (the dashboard's "
                                           "domain page shows the latest run)")

    @field_validator("items")
    @classmethod
    def _items(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"items must be >= 1, got {value}; an attack needs items to try")
        return value
