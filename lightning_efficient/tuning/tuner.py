"""``tune()``, the front end: checks its arguments, plans the options
(:mod:`~lightning_efficient.tuning.policy`), reuses a stored decision
(:mod:`~lightning_efficient.tuning.store`) or builds the measuring fits
(:mod:`~lightning_efficient.tuning.fits`) and runs the search, then stores the
:class:`~lightning_efficient.TuneResult`."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import torch
from lightning_fabric.utilities.data import sized_len
from lightning_utilities.core.rank_zero import rank_zero_only

from lightning_efficient.adapter import (
    LIGHTNING_PACKAGES,
    LightningDataModuleLike,
    LightningModuleLike,
    check_trainer_kwargs,
)
from lightning_efficient.callbacks.channels_last import ChannelsLast
from lightning_efficient.callbacks.report_facts import use_stored_results
from lightning_efficient.callbacks.roles import Role, role
from lightning_efficient.precision import check_precision
from lightning_efficient.tuning.fits import Trials, same_state
from lightning_efficient.tuning.policy import plan_options, search
from lightning_efficient.tuning.records import Asked, Candidate
from lightning_efficient.tuning.result import TuneResult
from lightning_efficient.tuning.store import Store, fingerprint, latest

__all__ = ["check_arguments", "kept_callbacks", "tune"]

#: Each number argument of tune(): ``(lowest, excluded; highest, included; what is expected)``.
RANGES = {
    "budget": (0.0, 1.0, "a fraction in (0, 1], e.g. 0.05"),
    "max_seconds": (0.0, 1e12, "seconds > 0"),
    "min_gain": (-1e-12, 1.0, "a number in [0, 1)"),
    "planned_steps": (0.0, 1e12, "an int >= 1"),
}


def kept_callbacks(callbacks: Any, package: Any) -> tuple[list[Any], list[str]]:
    """The user's callbacks that train along in the measuring fits (role ``Role.STEP_COST``), and the
    names left out."""
    roles = [(cb, role(cb, package)) for cb in callbacks]
    left_out = [type(cb).__name__ for cb, r in roles if r not in (Role.STEP_COST, Role.FACTOR)]
    return [cb for cb, r in roles if r == Role.STEP_COST], left_out


def check_arguments(asked: Asked, numbers: dict[str, Any], kwargs: dict[str, Any], cuda: bool) -> None:
    """Raise ``TypeError``/``ValueError`` naming the fix for an argument of :func:`tune` of the wrong
    kind."""
    precisions, workers = asked.precisions, asked.num_workers
    if isinstance(precisions, (str, int)):
        raise TypeError(
            f"tune(precisions={precisions!r}): expected a list, e.g. precisions=[{precisions!r}]."
        )
    for p in [kwargs.get("precision") or "32-true", *(precisions or [])]:
        check_precision(p, "tune()")
        if str(p) in ("16-mixed", "16") and not cuda and p in (precisions or []):
            why = "Lightning runs 16-mixed as bf16-mixed on a CPU"
            raise ValueError(f"tune(): {why}; measure 'bf16-mixed' instead.")
    for name in ("channels_last", "compile"):
        value = getattr(asked, name)
        if not (isinstance(value, bool) or value is None and name == "compile"):
            kinds = "True or False" + " or None" * (name == "compile")
            raise TypeError(f"tune({name}={value!r}): expected {kinds}")
    listed = isinstance(workers, (list, tuple, range, set))
    counts = listed and all(type(n) is int and n >= 0 for n in workers)
    if workers not in (None, True, False) and not counts:
        example = [workers] if isinstance(workers, int) else [0, 1]
        fix = f"e.g. num_workers={example}, False to keep the loader's, or None for the defaults"
        raise TypeError(f"tune(num_workers={workers!r}): expected a list of counts >= 0, {fix}.")
    for name, value in numbers.items():
        lo, hi, text = RANGES[name]
        types = (int,) if name == "planned_steps" else (int, float)
        wrong = type(value) not in types or not lo < value <= hi
        if wrong and not (name == "planned_steps" and value is None):
            raise ValueError(f"tune({name}={value!r}): expected {text}.")


def planned_batches(
    kwargs: dict[str, Any], loader: Any, planned_steps: Optional[int]
) -> Callable[[float], Optional[int]]:
    """``planned(optimizer_steps_per_batch)``: training batches of the planned run per process (``None``:
    unknown), from ``planned_steps`` or ``max_steps`` (optimizer steps) and ``max_epochs`` x batches per
    epoch."""
    devices, limit = kwargs.get("devices", 1), kwargs.get("limit_train_batches")
    epochs = kwargs.get("max_epochs") or 0
    world = (devices if isinstance(devices, int) and devices > 0 else 1) * (kwargs.get("num_nodes") or 1)
    per_epoch = -(
        -(sized_len(loader) or 0) // world
    )  # 0: no __len__, e.g. an IterableDataset's DataLoader
    per_epoch = min(per_epoch, limit) if isinstance(limit, int) else int(per_epoch * (limit or 1))
    steps, by_epochs = planned_steps or kwargs.get("max_steps") or -1, max(epochs, 0) * per_epoch

    def planned(per_batch: float) -> Optional[int]:
        by_steps = int(steps / per_batch) if steps > 0 else None
        return min(filter(None, [by_steps, by_epochs]), default=None)

    return planned


def training_loader(model: Any, train_dataloaders: Any, datamodule: Any) -> Any:
    """The training loader as Lightning would get it, or ``None`` where only the Trainer can build it;
    ValueError if there is no training data at all, or a one-shot iterator (tuning would use it up)."""
    if train_dataloaders is None and datamodule is not None:
        datamodule.prepare_data()
        datamodule.setup("fit")
    try:
        loader = train_dataloaders
        if train_dataloaders is None:
            loader = (datamodule or model).train_dataloader()
    except Exception:  # noqa: BLE001 - e.g. a hook that needs self.trainer, or none at all
        loader = None
    if loader is None and train_dataloaders is None and datamodule is None:
        fix = "pass train_dataloaders or datamodule, or define train_dataloader()"
        raise ValueError(f"tune(): no training data: {fix}")
    if isinstance(loader, torch.utils.data.Dataset):
        name = type(loader).__name__
        raise TypeError(f"tune(): the training data is a Dataset ({name}): wrap it in a DataLoader.")
    if hasattr(loader, "__next__") and iter(loader) is loader:
        why = "tuning would use it up; pass a DataLoader or an iterable that restarts"
        name = type(loader).__name__
        raise ValueError(f"tune(): the training data is a one-shot iterator ({name}): {why}.")
    return loader


def tune(
    model: LightningModuleLike,
    train_dataloaders: Union[Iterable[Any], LightningDataModuleLike, None] = None,
    datamodule: Optional[LightningDataModuleLike] = None,
    *,
    precisions: Optional[Sequence[str]] = None,
    channels_last: bool = True,
    compile: Optional[bool] = None,
    num_workers: Union[None, bool, Sequence[int]] = None,
    budget: float = 0.05,
    max_seconds: float = 60.0,
    planned_steps: Optional[int] = None,
    min_gain: float = 0.02,
    cache: bool = True,
    verbose: bool = True,
    **trainer_kwargs: Any,
) -> TuneResult:
    """Measure which settings train ``model`` fastest here, on its own data, within a time budget; change
    nothing.

    Factors: ``channels_last`` and the loader's ``num_workers`` (switched in place in one fit),
    ``precision`` and ``torch.compile`` (alternating short fits), decided by the rule in
    :mod:`lightning_efficient.tuning.policy`; one the budget cannot afford takes ``recipe()``'s default.
    A decision is reused while nothing it depends on changed (:mod:`lightning_efficient.tuning.store`).
    The fits run with the callbacks :mod:`lightning_efficient.callbacks.roles` keeps and a dummy logger,
    without validation, checkpoints and LR schedulers.

    Args:
        model: your LightningModule (copies are trained, never it).
        train_dataloaders: your training data, as for ``Trainer.fit``: a DataLoader (or an iterable of
            batches), or a LightningDataModule.
        datamodule: your training data as a LightningDataModule, as for ``Trainer.fit`` (give this or
            ``train_dataloaders``, not both).
        precisions: the Lightning precisions to try; ``None``: ``32-true``, ``bf16-mixed`` if the
            hardware runs it natively, ``16-mixed`` on CUDA.
        channels_last: measure ChannelsLast on and off; ``False``: keep as given.
        compile: measure ``torch.compile``; ``None``: on CUDA only.
        num_workers: the loader's ``num_workers`` counts to try; ``None``: 0, a quarter, half and all but
            one of the CPUs; ``False``: keep the loader's.
        budget: the share (0-1] of the planned run's training time (its batches x the current settings'
            median step time) that tuning may spend.
        max_seconds: the budget's cap in seconds, and the budget itself when the run has no planned
            length.
        planned_steps: the optimizer steps of the planned run; ``None``: ``max_steps`` from
            ``trainer_kwargs``. The planned length is the shorter of these steps and ``max_epochs`` x the
            batches per epoch.
        min_gain: the smallest relative gain in images/s that counts (``0.02``: 2 %).
        cache: reuse a stored decision for the same model, data and machine, and store this one.
        verbose: print the table of decisions (on rank zero).
        **trainer_kwargs: the ``Trainer`` arguments of your real run; its ``precision`` and a
            ChannelsLast among its ``callbacks`` are the current settings.

    Raises:
        TypeError: ``model`` not a LightningModule, data a Dataset, a Trainer argument no Trainer takes,
            a wrong kind.
        ValueError: a number out of range, a precision Lightning rejects, two data sources or none, a
            one-shot iterator.
        RuntimeError: the current settings themselves fail to train.

    Returns:
        What was measured and chosen, to train with (see the example).

    Example:
        ```python
        result = tune(model, train_loader, max_epochs=10)
        trainer = pl.Trainer(max_epochs=10, **recipe(tune=result))
        model = result.prepare_model(model)
        trainer.fit(model, result.dataloader(train_loader))
        ```
    """
    started = time.perf_counter()
    package = next((p for p in LIGHTNING_PACKAGES if isinstance(model, p.LightningModule)), None)
    if package is None:
        raise TypeError(f"tune(): model must be a LightningModule, got {type(model).__name__}.")
    check_trainer_kwargs(trainer_kwargs, "tune()", [package.Trainer], own=tune)
    asked = Asked(precisions, channels_last, compile, num_workers)
    numbers: dict[str, Any] = {"budget": budget, "max_seconds": max_seconds, "min_gain": min_gain}
    numbers["planned_steps"] = planned_steps
    accelerator = str(trainer_kwargs.get("accelerator", "auto"))
    cuda = accelerator in ("cuda", "gpu") or accelerator == "auto" and torch.cuda.is_available()
    check_arguments(asked, numbers, trainer_kwargs, cuda)
    if isinstance(train_dataloaders, package.LightningDataModule) and datamodule is None:
        train_dataloaders, datamodule = (
            None,
            train_dataloaders,
        )  # tune(model, dm), as trainer.fit(model, dm)
    if train_dataloaders is not None and datamodule is not None:
        why = "pass train_dataloaders or one datamodule, not both; tune() takes no validation data"
        raise ValueError(f"tune(): {why}.")
    with same_state():  # the data hooks, the first sample and the fits may draw from the global RNGs
        loader = training_loader(model, train_dataloaders, datamodule)
        callbacks = trainer_kwargs.get("callbacks") or []
        callbacks = callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]
        cl = any(isinstance(c, ChannelsLast) for c in callbacks)
        precision = str(trainer_kwargs.get("precision") or "32-true")
        options = plan_options("cuda" if cuda else "cpu", precision, asked, loader)
        notes = options.notes
        workers = loader.num_workers if options.values["num_workers"] else None
        current = Candidate(precision, cl, num_workers=workers)
        kept, dropped = kept_callbacks(callbacks, package)
        left_out = f"not in the measuring fits: {', '.join(sorted(set(dropped)))} (see callbacks.roles)"
        notes += [left_out] * bool(dropped)
        planned = planned_batches(trainer_kwargs, loader, planned_steps)
        depends = [options.values, min_gain, repr(vars(asked))]
        fp, unreadable = fingerprint(model, loader, kept, trainer_kwargs, depends)
        notes += [
            f"measured, neither reused nor stored: {part} could not be read"
            for part in unreadable * cache
        ]
        store = Store(fp, cache, unreadable)
        if (result := store.load(planned, budget, max_seconds)) is not None:
            result.reused_from, result.tuning_s = str(store.path), time.perf_counter() - started
        else:
            layouts = bool(options.values["channels_last"]) or cl
            trials = Trials(
                model,
                train_dataloaders,
                datamodule,
                loader,
                trainer_kwargs,
                package,
                kept,
                layouts=layouts,
                workers=options.values["num_workers"],
                started=started,  # the budget counts from the call, as tuning_s does
            )
            gen = search(
                current,
                options.values,
                options.defaults,
                trials.pair_cost,
                budget,
                max_seconds,
                min_gain,
            )
            chosen, decisions, baseline, budget_s = trials.run(gen, planned)
            tuning_s = time.perf_counter() - started
            known = store.fp or {}
            result = TuneResult(
                current,
                chosen,
                decisions,
                baseline,
                budget_s,
                tuning_s,
                machine=known.get("machine", {}),
                arch=known.get("arch", ""),
                notes=notes,
            )
            batch = result.baseline.batch_size
            size = f"tune() measured the loader's batch size ({batch}); your BatchSizeFinder"
            result.notes += [f"{size} may choose another, with other step times"] * (
                "BatchSizeFinder" in dropped
            )
            store.save(result)
    if verbose:
        rank_zero_only(print)(result)
    return result


# EfficiencyReport (a layer below) quotes tune()'s newest stored result for a model it is not handed.
use_stored_results(latest)
