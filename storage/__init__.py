"""Storage shared by every stage: the Parquet lake (:mod:`storage.lake`), its table contracts
(:mod:`storage.tables`), readers of user files (:mod:`storage.readers`), writer identities that
make lake recovery safe (:mod:`storage.process_identity`), everything Assay keeps in MLflow
(:mod:`storage.tracking`: experiment, registered model, champion alias, runs) and markdown tables
for metadata and text artifacts (:mod:`storage.markdown`). Imports polars, pyarrow and duckdb
only; MLflow lazily."""
