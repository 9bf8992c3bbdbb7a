"""Known-harmless Lightning output, silenced inside this package's own runs only.

The library never filters warnings or log records on import or in the user's fits: a user's process sees
everything Lightning says. The demo (``lightning-efficient demo``), whose output is a table the user reads, runs
its Trainers inside :func:`quiet_lightning`, which drops exactly the items below (each matched by category and
message) and nothing else, and restores the previous warning filters and logger filters on exit.
:func:`~lightning_efficient.tune` runs its short measuring fits inside :func:`no_lightning_info`, so that the
user sees its table instead of a dozen "GPU available" / "`Trainer.fit` stopped" blocks.

Importing this package imports ``pytorch_lightning`` and, where installed, ``lightning.pytorch``. On import, each
points the module-level state of ``lightning_utilities.core.rank_zero``, which both packages share (the logger of
every ``rank_zero_info`` / ``rank_zero_debug``, the category of rank-zero deprecations), at its own: the last one
imported receives both packages' messages. ``lightning_efficient/__init__.py`` therefore runs its imports inside
:func:`keep_lightning_logging`: where a Lightning package was imported before, Lightning's logging stays as it was
(a user's set-up of the ``lightning.pytorch`` loggers keeps receiving Lightning's messages); in a process that has
imported none, it is ``pytorch_lightning``'s.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator

__all__ = [
    "HARMLESS_WARNINGS",
    "LIGHTNING_LOGGERS",
    "RANK_ZERO_STATE",
    "TIP_PREFIX",
    "keep_lightning_logging",
    "no_lightning_info",
    "quiet_lightning",
]

#: ``(category, message regex)`` of warnings that tell the demo's user nothing they can act on.
HARMLESS_WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    # torch >= 2.10 deprecates constructing `LeafSpec`; Lightning's CombinedLoader (both packages) still does, once
    # per fit. Lightning's to fix; harmless.
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    # Lightning's ModelSummary estimates the model size at 32 bits for the `*-mixed` / `*-true` half precisions.
    (UserWarning, r"Precision \S+ is not supported by the model summary"),
)

#: Lightning's advertisements ("💡 Tip: For seamless cloud logging ... litlogger", "... litmodels") begin so.
TIP_PREFIX = "💡 Tip:"

#: Loggers through which Lightning (either package) emits ``rank_zero_info`` messages.
LIGHTNING_LOGGERS: tuple[str, ...] = (
    "lightning_utilities.core.rank_zero",
    "lightning_fabric.utilities.rank_zero",
    "pytorch_lightning.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.utilities.rank_zero",
)


#: The names in ``lightning_utilities.core.rank_zero`` that importing a Lightning package overwrites.
RANK_ZERO_STATE: tuple[str, ...] = ("log", "rank_zero_deprecation_category")

#: The modules whose import sets :data:`RANK_ZERO_STATE`: each package's ``utilities.rank_zero`` and its Fabric's.
_RANK_ZERO_SETTERS: tuple[str, ...] = (
    "lightning_fabric.utilities.rank_zero",
    "pytorch_lightning.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.utilities.rank_zero",
)


@contextlib.contextmanager
def keep_lightning_logging() -> Iterator[None]:
    """Leave Lightning's shared rank-zero logging state (:data:`RANK_ZERO_STATE`) as it was before the block.

    Only where a Lightning package had already set it: in a process that has imported none, the state the block's
    imports set stays (there is nothing of the user's to keep). Imports nothing itself.
    """
    rank_zero = sys.modules.get("lightning_utilities.core.rank_zero")
    saved: dict[str, object] = {}
    if rank_zero is not None and any(name in sys.modules for name in _RANK_ZERO_SETTERS):
        saved = {name: vars(rank_zero)[name] for name in RANK_ZERO_STATE if name in vars(rank_zero)}
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(rank_zero, name, value)


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TIP_PREFIX)


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Inside the block, drop :data:`HARMLESS_WARNINGS` and Lightning's :data:`TIP_PREFIX` log lines; nothing else.

    Warning filters are those of :func:`warnings.catch_warnings` (restored on exit; not thread-safe, like it).
    """
    tip_filter = _DropTips()
    loggers = {logging.getLogger(name) for name in LIGHTNING_LOGGERS}
    rank_zero = _current_rank_zero_logger()
    if rank_zero is not None:
        loggers.add(rank_zero)
    with warnings.catch_warnings():
        for category, message in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        for logger in loggers:
            logger.addFilter(tip_filter)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(tip_filter)


@contextlib.contextmanager
def no_lightning_info() -> Iterator[None]:
    """Inside the block, Lightning's ``rank_zero_info`` messages (INFO level: "GPU available", "`Trainer.fit`
    stopped", tips) are not shown; warnings and errors are. Logger levels are restored on exit."""
    loggers = {logging.getLogger(name) for name in LIGHTNING_LOGGERS}
    rank_zero = _current_rank_zero_logger()
    if rank_zero is not None:
        loggers.add(rank_zero)
    levels = {logger: logger.level for logger in loggers}
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for logger, level in levels.items():
            logger.setLevel(level)


def _current_rank_zero_logger() -> logging.Logger | None:
    """The logger ``rank_zero_info`` writes to now (the last Lightning package imported redirects it)."""
    try:
        from lightning_utilities.core import rank_zero
    except ImportError:
        return None
    log = getattr(rank_zero, "log", None)
    return log if isinstance(log, logging.Logger) else None
