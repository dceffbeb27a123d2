"""The Streamlit dashboard for domain owners: ``ui/app.py`` routes over ``ui/app_pages/``; it reads
the lake through DuckDB and MLflow (:mod:`ui.queries`, :mod:`ui.data`), never training code."""
