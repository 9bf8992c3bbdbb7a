"""Suggested ``torch.utils.data.DataLoader`` keyword arguments for ``uint8`` image loading, with reasons."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

__all__ = ["LoaderSettings", "available_cpus", "can_rebuild", "suggest_loader_kwargs", "with_num_workers"]


def available_cpus() -> int:
    """CPU cores this process may run on (``os.sched_getaffinity`` where available, else ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class LoaderSettings:
    """``kwargs`` to pass to ``DataLoader(dataset, batch_size=..., shuffle=..., **kwargs)`` and why.

    Attributes:
        kwargs: ``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor`` and ``collate_fn``.
        reasons: one sentence per key explaining the value.
    """

    kwargs: dict[str, Any]
    reasons: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return "\n".join(f"{k}={self.kwargs[k]!r}: {self.reasons.get(k, '')}" for k in self.kwargs)


def suggest_loader_kwargs(
    *,
    processes_per_node: int = 1,
    cpus: int | None = None,
    cuda: bool | None = None,
    max_workers: int = 16,
    uint8: bool = True,
    cpu_training: bool | None = None,
) -> LoaderSettings:
    """Suggest DataLoader settings for decoding images on the CPU, training on an accelerator or on the CPU itself.

    Rules (rules of thumb from the PyTorch performance tuning guide and Lightning's DataLoader warnings, and one
    measurement):

    * ``num_workers`` when training on an accelerator: ``min(max_workers, cpus // processes_per_node - 1)``: one
      core per training process stays free for the main process (it runs the training loop and collation
      hand-off); 0 when a process has < 2 cores (workers would only compete with the main process).
    * ``num_workers`` when training on the CPU: the training step's own threads use every core of its process, so
      each worker takes cores from it: ``min(max_workers, cpus // processes_per_node // 4)``, 0 up to 3 cores per
      process. On a 2-core CPU, 0 workers trains about as fast as 1 worker or faster at each model's fastest
      settings (``benchmarks/tune.py``'s referee, separate fits: ``benchmarks/results/tune.md``); the quarter above
      3 cores is a rule of thumb, not measured.
      :func:`~lightning_efficient.tune` measures the worker count where its budget allows.
    * ``pin_memory = cuda``: page-locked host buffers make host-to-GPU copies faster and allow non-blocking
      transfer; useless (and it costs locked RAM) without CUDA.
    * ``persistent_workers = num_workers > 0``: keep workers (and their decoded-file caches, open handles, RNG
      streams) across epochs instead of re-forking them every epoch.
    * ``prefetch_factor = 2`` batches per worker (PyTorch's default) when workers are used, ``None`` otherwise (the
      DataLoader rejects a prefetch factor with ``num_workers=0``).
    * ``collate_fn = uint8_collate`` when ``uint8`` (the dataset yields ``uint8`` tensors; see
      :func:`~lightning_efficient.data.folder.uint8_collate`).

    Args:
        processes_per_node: training processes sharing this machine's cores (e.g. DDP devices per node), >= 1.
        cpus: cores available; default :func:`available_cpus`.
        cuda: whether batches go to a CUDA device; default ``torch.cuda.is_available()``.
        cpu_training: whether the training step runs on the CPU; default: neither CUDA (``cuda``) nor an MPS device
            is available.
        max_workers: upper bound on workers per process, >= 0.
        uint8: include ``collate_fn=uint8_collate``.

    Returns:
        :class:`LoaderSettings` with ``kwargs`` and ``reasons``.

    Raises:
        ValueError: ``processes_per_node < 1``, ``cpus < 1`` or ``max_workers < 0``.

    Example:
        ```python
        settings = suggest_loader_kwargs(processes_per_node=trainer.num_devices)
        print(settings)  # one line per setting with its reason
        loader = DataLoader(
            FastImageFolder(root), batch_size=256, shuffle=True,
            **settings.kwargs,
        )
        ```
    """
    if not isinstance(processes_per_node, int) or processes_per_node < 1:
        raise ValueError(f"processes_per_node must be an int >= 1, got {processes_per_node!r}.")
    if cpus is None:
        cpus = available_cpus()
    if not isinstance(cpus, int) or cpus < 1:
        raise ValueError(f"cpus must be an int >= 1, got {cpus!r}.")
    if not isinstance(max_workers, int) or max_workers < 0:
        raise ValueError(f"max_workers must be an int >= 0, got {max_workers!r}.")
    if cuda is None:
        cuda = torch.cuda.is_available()

    if cpu_training is None:
        cpu_training = not cuda and not torch.backends.mps.is_available()

    per_process = cpus // processes_per_node
    uncapped = per_process // 4 if cpu_training else max(per_process - 1, 0)
    num_workers = min(max_workers, uncapped)
    kwargs: dict[str, Any] = {
        "num_workers": num_workers,
        "pin_memory": bool(cuda),
        "persistent_workers": num_workers > 0,
        "prefetch_factor": 2 if num_workers > 0 else None,
    }
    reasons = {
        "num_workers": (
            f"{cpus} cores / {processes_per_node} process(es) = {per_process} per process; "
            + (
                "training on the CPU uses them all, so a quarter go to workers"
                + ("" if uncapped else " (none up to 3 cores: decode in the main process)")
                if cpu_training
                else "one stays with the main process"
                + ("" if uncapped else "; fewer than 2 cores per process, so decode in the main process")
            )
            + (f", capped at max_workers={max_workers}" if uncapped > max_workers else "")
            + "."
        ),
        "pin_memory": "CUDA available: pinned buffers speed up host-to-device copies."
        if cuda
        else "no CUDA: pinning would only lock RAM.",
        "persistent_workers": "keep workers alive across epochs (no re-fork per epoch)."
        if num_workers
        else "no workers to keep.",
        "prefetch_factor": "2 batches in flight per worker (PyTorch default)."
        if num_workers
        else "must be None when num_workers=0.",
    }
    if uint8:
        from lightning_efficient.data.folder import uint8_collate

        kwargs["collate_fn"] = uint8_collate
        reasons["collate_fn"] = "stacks uint8 [3, H, W] images into uint8 [B, 3, H, W] and int64 targets."
    return LoaderSettings(kwargs, reasons)


def can_rebuild(loader: Any) -> Optional[str]:
    """``None`` if :func:`with_num_workers` can rebuild ``loader``, else why not (one sentence).

    A ``torch.utils.data.DataLoader`` over a map-style dataset can be rebuilt; an ``IterableDataset`` cannot be
    given more workers safely (each worker would yield the whole stream unless the dataset shards itself by
    ``get_worker_info()``), and other iterables are not DataLoaders.
    """
    from torch.utils.data import DataLoader, IterableDataset

    if not isinstance(loader, DataLoader):
        return f"the training data is a {type(loader).__name__}, not a torch DataLoader"
    if isinstance(loader.dataset, IterableDataset):
        return (
            "the dataset is an IterableDataset: with more workers each worker yields the whole stream unless "
            "the dataset shards itself with get_worker_info()"
        )
    return None


def with_num_workers(loader: Any, num_workers: int) -> Any:
    """A ``DataLoader`` like ``loader`` (same dataset, batch sampler, collate function, pinning, worker
    initialisation and generator) with ``num_workers`` worker processes.

    Args:
        loader: a ``torch.utils.data.DataLoader`` over a map-style dataset.
        num_workers: worker processes, ``>= 0`` (0: load in the main process).

    Returns:
        A new ``DataLoader``; ``loader`` is not modified. ``persistent_workers`` and ``prefetch_factor`` are kept
        where ``num_workers > 0`` allows them; from a loader without workers, ``persistent_workers=True`` (as
        :func:`suggest_loader_kwargs` recommends: no worker start-up at every epoch).

    Raises:
        ValueError: ``num_workers < 0``.
        TypeError: ``loader`` cannot be rebuilt (:func:`can_rebuild` says why).
    """
    from torch.utils.data import DataLoader

    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
        raise ValueError(f"with_num_workers(num_workers={num_workers!r}): expected an integer >= 0.")
    why = can_rebuild(loader)
    if why:
        raise TypeError(f"with_num_workers(): cannot rebuild the loader: {why}; set num_workers where you build it.")
    kwargs: dict[str, Any] = dict(
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        multiprocessing_context=loader.multiprocessing_context if num_workers > 0 else None,
    )
    if getattr(loader, "pin_memory_device", ""):
        kwargs["pin_memory_device"] = loader.pin_memory_device
    if num_workers > 0:
        kwargs["persistent_workers"] = loader.persistent_workers or loader.num_workers == 0
        kwargs["prefetch_factor"] = loader.prefetch_factor or 2
    if loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler
    else:
        kwargs.update(batch_size=None, sampler=loader.sampler)
    return DataLoader(loader.dataset, num_workers=num_workers, **kwargs)
