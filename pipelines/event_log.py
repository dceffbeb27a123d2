"""A file for the Dagster event stream of the jobs Assay runs in its own process (``assay demo``).

Without a logger in the run config, Dagster prints every run event at DEBUG level to the console;
a person running ``assay demo`` wants the demo's own progress and summary instead. While an
:class:`EventLogFile` is open, runs that use :meth:`EventLogFile.job` and :meth:`run_config` log
every event (DEBUG and up, Dagster's usual format) to ``$ASSAY_HOME/logs/<name>-<timestamp>.log``,
and so do the libraries that would otherwise print on the console during those runs (MLflow's
store migrations, alembic, Python warnings). The runs stay in the instance, so ``make ui`` shows
them with their events as before.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime
from pathlib import Path

LOGGER_KEY = "assay_event_log"
# Libraries whose console chatter during a run belongs in the file (their records still reach it).
LIBRARY_LOGGERS = ("mlflow", "alembic", "py.warnings", "dagster", "great_expectations")


class EventLogFile:
    def __init__(self, home: str | os.PathLike, name: str = "demo"):
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        self.path = Path(home) / "logs" / f"{name}-{stamp}-{os.getpid()}.log"
        self._handler: logging.FileHandler | None = None
        self._saved: dict[str, tuple[list[logging.Handler], bool]] = {}
        self._captured_warnings = False

    def __enter__(self) -> "EventLogFile":
        from dagster._utils.log import define_default_formatter  # Dagster's own line format

        # MLflow installs its own stderr handler when first imported: import it now, route it after.
        import mlflow  # noqa: F401

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handler = logging.FileHandler(self.path, mode="a", encoding="utf-8")
        self._handler.setFormatter(define_default_formatter())
        self._handler.setLevel(logging.DEBUG)
        for name in LIBRARY_LOGGERS:
            logger = logging.getLogger(name)
            self._saved[name] = (list(logger.handlers), logger.propagate)
            logger.handlers = [self._handler]
            logger.propagate = False
        self._captured_warnings = True
        logging.captureWarnings(True)
        return self

    def __exit__(self, *exc) -> None:
        for name, (handlers, propagate) in self._saved.items():
            logger = logging.getLogger(name)
            logger.handlers, logger.propagate = handlers, propagate
        self._saved.clear()
        if self._captured_warnings:
            logging.captureWarnings(False)
        if self._handler is not None:
            self._handler.close()
            self._handler = None

    def _logger_def(self):
        import dagster as dg

        handler = self._handler
        if handler is None:
            raise RuntimeError("open the EventLogFile (with ...) before running jobs with it")

        @dg.logger(description="Every run event, DEBUG and up, to the Assay event log file.")
        def assay_event_log(init_context) -> logging.Logger:
            logger = logging.Logger("dagster", level=logging.DEBUG)  # not registered: no propagation
            logger.addHandler(handler)
            return logger

        return assay_event_log

    def job(self, job_def):
        """``job_def`` with this file as its only logger (no DEBUG stream on the console)."""
        return job_def.with_logger_defs({LOGGER_KEY: self._logger_def()})

    @staticmethod
    def run_config(run_config: dict | None = None) -> dict:
        return {**(run_config or {}), "loggers": {LOGGER_KEY: {}}}
