"""structlog configuration: logs go to stderr so stdout stays clean JSON for pipelines."""

from __future__ import annotations

import logging
import sys

import structlog

#: What the last :func:`configure` set (``-v`` count): a supervisor hands it to the processes it spawns.
_SET = {"verbosity": 0}


def current_verbosity() -> int:
    """The verbosity logging was last configured with (0 warnings, 1 info, 2 debug)."""
    return _SET["verbosity"]


def configure(verbosity: int = 0, *, json_logs: bool | None = None) -> None:
    _SET["verbosity"] = verbosity
    level = logging.WARNING - 10 * min(verbosity, 2)
    as_json = (not sys.stderr.isatty()) if json_logs is None else json_logs
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
