"""Dagster wiring and the CLI: :mod:`pipelines.definitions` (the one ``Definitions``),
:mod:`assets.resources` (the one place resources are chosen), partitions, jobs, sensors,
schedules, the instance's run queue and pools (:mod:`pipelines.instance`), config derivation
(:mod:`assets.config_bridge`, :mod:`pipelines.config_flags`) and the ``assay`` CLI
(:mod:`pipelines.cli`, :mod:`pipelines.commands`)."""
