"""Fetch timing: listeners called around every fetch of a training batch, for the data wait of a step.

Lightning's training loop has no hook around the fetch of a batch, but its data fetcher starts and stops a profiler
action around ``next()`` on the training loader. :func:`watch_fetch` wraps the profiler's ``start``/``stop`` on the
Trainer's profiler instance and calls listeners (``fetch_started()`` / ``fetch_stopped()``) for that action only;
the step timeline (:mod:`lightning_efficient.functional.timing`) is such a listener.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["FETCH_ACTION", "watch_fetch"]

#: The profiler action Lightning's training loop starts and stops around each fetch of a training batch
#: (``loops/training_epoch_loop.py``: ``_on_before_fetch`` / ``_on_after_fetch``, "[_TrainingEpochLoop].<this>").
FETCH_ACTION = "train_dataloader_next"


def watch_fetch(trainer: Any, listener: Any) -> Callable[[], None]:
    """Call ``listener.fetch_started()`` / ``listener.fetch_stopped()`` around every fetch of a training batch.

    Lightning's data fetcher calls ``trainer.profiler.start(action)`` and ``stop(action)`` around ``next()`` on the
    training loader (the action ends with :data:`FETCH_ACTION`), for sized loaders at the start of each step, for
    others one batch ahead. The wrapper is set on the profiler instance (Lightning looks ``start``/``stop`` up at
    each call) and calls the profiler's own methods as before; listeners of several callbacks share it.

    Returns:
        A function that removes ``listener`` (and the wrapper with the last listener).
    """
    profiler = trainer.profiler
    listeners = profiler.__dict__.get("_lightning_efficient_fetch")
    if listeners is None:
        saved = {name: profiler.__dict__.get(name) for name in ("start", "stop")}
        start, stop, listeners = profiler.start, profiler.stop, []

        def wrapped_start(action_name: str) -> None:
            if action_name.endswith(FETCH_ACTION):
                for each in list(listeners):
                    each.fetch_started()
            start(action_name)

        def wrapped_stop(action_name: str) -> None:
            stop(action_name)
            if action_name.endswith(FETCH_ACTION):
                for each in list(listeners):
                    each.fetch_stopped()

        profiler.start, profiler.stop = wrapped_start, wrapped_stop
        profiler._lightning_efficient_fetch, profiler._lightning_efficient_saved = listeners, saved
    listeners.append(listener)

    def remove() -> None:
        if listener in listeners:
            listeners.remove(listener)
        if not listeners and profiler.__dict__.get("_lightning_efficient_fetch") is listeners:
            for name, value in profiler.__dict__.pop("_lightning_efficient_saved").items():
                if value is None:
                    profiler.__dict__.pop(name, None)
                else:
                    setattr(profiler, name, value)
            del profiler._lightning_efficient_fetch

    return remove
