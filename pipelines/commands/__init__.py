"""One module per ``assay`` command group; each exposes ``register(subparsers)``."""
