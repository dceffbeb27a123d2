"""Thin Dagster assets and checks, one module per stage. Each loads its inputs from the lake,
calls a library function, and returns rich metadata. ``pipelines.definitions`` collects them all."""
