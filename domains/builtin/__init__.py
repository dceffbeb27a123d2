"""Built-in domains: one module per domain (or pack), each exposing DOMAIN or DOMAINS.

The registry loads every module here the same way it loads plugins; nothing else lists them.
Modules import their data packages lazily, inside ``samples``/``score``, so that listing the
registry (and loading the Dagster definitions) stays fast.
"""
