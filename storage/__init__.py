"""Storage shared by every stage: the Parquet lake (:mod:`storage.lake`), its table contracts
(:mod:`storage.tables`), readers of user files (:mod:`storage.readers`), writer identities that
make lake recovery safe (:mod:`storage.process_identity`) and MLflow tracking
(:mod:`storage.tracking`). Imports polars, pyarrow and duckdb only; MLflow lazily."""
