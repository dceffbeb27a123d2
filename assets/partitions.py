"""Partitions: domains are a static set built from the registry; checkpoints are dynamic."""

from __future__ import annotations

import dagster as dg

from domains import get_registry

# Built from the registry when definitions load: plugins in $ASSAY_DOMAINS_PATH become partitions.
domain_partitions = dg.StaticPartitionsDefinition(get_registry().names or ["_none"])

# Filled by the checkpoint sensor (and the training asset) from what MLflow registers.
checkpoint_partitions = dg.DynamicPartitionsDefinition(name="checkpoint")
