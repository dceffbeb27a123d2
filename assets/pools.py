"""Assay's concurrency pools: the names heavy assets tag their steps with.

The limits of each pool live in the Dagster instance (:mod:`pipelines.instance` writes them);
the names live here so the assets and their Kubernetes tags (:mod:`assets.k8s`) need nothing
from pipelines/ (the import contracts in pyproject.toml).
"""

POOL_TRAINER = "trainer"
POOL_SWEEP = "sweep"
POOL_INGEST = "ingest"
POOL_MAINTENANCE = "maintenance"  # lake maintenance (assets.maintenance): one at a time
POOLS = (POOL_TRAINER, POOL_SWEEP, POOL_INGEST, POOL_MAINTENANCE)
