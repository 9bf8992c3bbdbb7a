"""``tune()``: measure the practices on the user's own model, data and hardware, within a time budget. The rule, the
fits and the result live in :mod:`lightning_efficient.functional.tuning`, ``tune_probe`` and ``tune_result``."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import torch
from lightning_fabric.utilities.data import sized_len
from lightning_utilities.core.rank_zero import rank_zero_only, rank_zero_warn

from lightning_efficient.callbacks.base import LIGHTNING_PACKAGES, LightningDataModuleLike, LightningModuleLike
from lightning_efficient.callbacks.channels_last import ChannelsLast
from lightning_efficient.callbacks.roles import role
from lightning_efficient.data.loader import available_cpus, can_rebuild, suggest_loader_kwargs
from lightning_efficient.functional.tuning import Candidate, search
from lightning_efficient.precision import check_precision, cpu_has_native_bf16, recommended_precision
from lightning_efficient.recipe import check_trainer_kwargs
from lightning_efficient.tune_probe import Trials, same_state
from lightning_efficient.tune_result import Store, TuneResult, fingerprint

__all__ = ["TuneResult", "kept_callbacks", "tune"]


def kept_callbacks(callbacks: Any, package: Any) -> tuple[list[Any], list[str]]:
    """The user's callbacks that train along in the measuring fits (role ``"step cost"``), and the names left out."""
    roles = [(cb, role(cb, package)) for cb in callbacks]
    left_out = [type(cb).__name__ for cb, r in roles if r not in ("step cost", "factor")]
    return [cb for cb, r in roles if r == "step cost"], left_out


def _check(asked: dict[str, Any], numbers: dict[str, Any], kwargs: dict[str, Any], cuda: bool) -> None:
    """Raise ``TypeError``/``ValueError`` naming the fix for an argument of :func:`tune` of the wrong kind."""
    precisions, workers = asked["precisions"], asked["num_workers"]
    if isinstance(precisions, (str, int)):
        raise TypeError(f"tune(precisions={precisions!r}): expected a list, e.g. precisions=[{precisions!r}].")
    for p in [kwargs.get("precision") or "32-true", *(precisions or [])]:
        check_precision(p, "tune()")
        if str(p) in ("16-mixed", "16") and not cuda and p in (precisions or []):
            raise ValueError("tune(): Lightning runs 16-mixed as bf16-mixed on a CPU; measure 'bf16-mixed' instead.")
    for name in ("channels_last", "compile"):
        if not (isinstance(asked[name], bool) or asked[name] is None and name == "compile"):
            raise TypeError(f"tune({name}={asked[name]!r}): expected True or False" + " or None" * (name == "compile"))
    listed = isinstance(workers, (list, tuple, range, set))
    if workers not in (None, True, False) and not (listed and all(type(n) is int and n >= 0 for n in workers)):
        example = [workers] if isinstance(workers, int) else [0, 1]
        fix = f"e.g. num_workers={example}, False to keep the loader's, or None for the defaults"
        raise TypeError(f"tune(num_workers={workers!r}): expected a list of counts >= 0, {fix}.")
    ranges = {"budget": (0.0, 1.0, "a fraction in (0, 1], e.g. 0.05"), "max_seconds": (0.0, 1e12, "seconds > 0")}
    ranges |= {"min_gain": (-1e-12, 1.0, "a number in [0, 1)"), "planned_steps": (0.0, 1e12, "an int >= 1")}
    for name, value in numbers.items():
        lo, hi, text = ranges[name]
        wrong = type(value) not in ((int,) if name == "planned_steps" else (int, float)) or not lo < value <= hi
        if wrong and not (name == "planned_steps" and value is None):
            raise ValueError(f"tune({name}={value!r}): expected {text}.")


def _options(device: str, precision: str, asked: dict[str, Any], loader: Any) -> tuple[dict, dict, list[str]]:
    """The values to try per factor, ``recipe()``'s default of each (where it is among them), and notes."""
    notes, precisions, workers, cpus = [], asked["precisions"], asked["num_workers"], available_cpus()
    native = torch.cuda.is_bf16_supported() if device == "cuda" else cpu_has_native_bf16()
    if precisions is None:
        precisions = ["32-true"] + ["bf16-mixed"] * native + ["16-mixed"] * (device == "cuda")
        notes += ["bf16-mixed not measured: emulated here (no AVX512-BF16/AMX); list it in precisions="] * (not native)
    why = can_rebuild(loader) if loader is not None else "the training loader is built inside the Trainer"
    if workers is not False and why:
        notes.append(f"num_workers not measured: {why}")
        if workers not in (None, True):
            rank_zero_warn(f"tune(num_workers={list(workers)}): not measured ({why}); set num_workers in your loader.")
    counts = set(workers) if workers not in (None, True, False) else {0, cpus // 4, cpus // 2, max(cpus - 1, 0)}
    compiled = asked["compile"] if asked["compile"] is not None else device == "cuda"
    notes += ["torch.compile not measured (by default on CUDA only; ask for it to measure it)"] * (not compiled)
    options = {"precision": list(dict.fromkeys([precision, *precisions])), "compile": [False, True] * compiled}
    options["num_workers"] = sorted(counts) * (workers is not False and not why)
    options["channels_last"] = [False, True] * asked["channels_last"]
    defaults = {"precision": recommended_precision(device), "channels_last": True, "compile": False}
    defaults["num_workers"] = suggest_loader_kwargs(cuda=device == "cuda").kwargs["num_workers"]
    return options, {k: v for k, v in defaults.items() if v in options[k]}, notes


def _planned(kwargs: dict[str, Any], loader: Any, planned_steps: Optional[int]) -> Callable[[float], Optional[int]]:
    """``planned(optimizer_steps_per_batch)``: training batches of the planned run per process (``None``: unknown),
    from ``planned_steps`` or ``max_steps`` (optimizer steps) and ``max_epochs`` x batches per epoch."""
    devices, limit, epochs = kwargs.get("devices", 1), kwargs.get("limit_train_batches"), kwargs.get("max_epochs") or 0
    world = (devices if isinstance(devices, int) and devices > 0 else 1) * (kwargs.get("num_nodes") or 1)
    per_epoch = -(-(sized_len(loader) or 0) // world)  # 0: no __len__, e.g. an IterableDataset's DataLoader
    per_epoch = min(per_epoch, limit) if isinstance(limit, int) else int(per_epoch * (limit or 1))
    steps, by_epochs = planned_steps or kwargs.get("max_steps") or -1, max(epochs, 0) * per_epoch
    return lambda per_batch: min(filter(None, [int(steps / per_batch) if steps > 0 else None, by_epochs]), default=None)


def _training_loader(model: Any, train_dataloaders: Any, datamodule: Any) -> Any:
    """The training loader as Lightning would get it, or ``None`` where only the Trainer can build it; ValueError if
    there is no training data at all, or a one-shot iterator (tuning would use it up)."""
    if train_dataloaders is None and datamodule is not None:
        datamodule.prepare_data()
        datamodule.setup("fit")
    try:
        loader = train_dataloaders if train_dataloaders is not None else (datamodule or model).train_dataloader()
    except Exception:  # noqa: BLE001 - e.g. a hook that needs self.trainer, or none at all
        loader = None
    if loader is None and train_dataloaders is None and datamodule is None:
        raise ValueError("tune(): no training data: pass train_dataloaders or datamodule, or define train_dataloader()")
    if isinstance(loader, torch.utils.data.Dataset):
        raise TypeError(f"tune(): the training data is a Dataset ({type(loader).__name__}): wrap it in a DataLoader.")
    if hasattr(loader, "__next__") and iter(loader) is loader:
        why = "tuning would use it up; pass a DataLoader or an iterable that restarts"
        raise ValueError(f"tune(): the training data is a one-shot iterator ({type(loader).__name__}): {why}.")
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
    """Measure which settings train ``model`` fastest here, on its own data, within a time budget; change nothing.

    Factors: ``channels_last`` and the loader's ``num_workers`` (switched in place in one fit), ``precision`` and
    ``torch.compile`` (alternating short fits), decided by the rule in :mod:`lightning_efficient.functional.tuning`; one
    the budget cannot afford takes ``recipe()``'s default. A decision is reused while nothing it depends on changed
    (:mod:`lightning_efficient.tune_result`). The fits run with the callbacks :mod:`lightning_efficient.callbacks.roles`
    keeps and a dummy logger, without validation, checkpoints and LR schedulers.

    Args:
        model: your LightningModule (copies are trained, never it).
        train_dataloaders, datamodule: your training data, as for ``Trainer.fit``.
        precisions: to try (default ``32-true``, ``bf16-mixed`` if the hardware runs it natively, ``16-mixed`` on CUDA).
        channels_last: measure ChannelsLast on and off (``False``: keep as given).
        compile: measure ``torch.compile``; ``None``: on CUDA only.
        num_workers: counts to try; ``None``: 0, a quarter, half and all but one of the CPUs; ``False``: keep.
        budget: share (0-1] of the planned run's training time (its batches x the current settings' median step
            time) to spend; ``max_seconds``: its cap, and the budget without a planned length; ``planned_steps``:
            optimizer steps of the run (default: ``max_steps`` or ``max_epochs`` x batches per epoch).
        min_gain: smallest relative gain that counts.
        cache: reuse a stored decision and store this one; ``verbose``: print the table (rank zero).
        **trainer_kwargs: the ``Trainer`` arguments of your real run; its ``precision`` and a ChannelsLast among
            its ``callbacks`` are the current settings.

    Raises:
        TypeError: ``model`` not a LightningModule, data a Dataset, a Trainer argument no Trainer takes, a wrong kind.
        ValueError: a number out of range, a precision Lightning rejects, two data sources or none, a one-shot iterator.
        RuntimeError: the current settings themselves fail to train.

    Returns:
        A :class:`~lightning_efficient.TuneResult`, to train with, e.g.::

            result = tune(model, train_loader, max_epochs=10)
            trainer = pl.Trainer(max_epochs=10, **recipe(tune=result))
            trainer.fit(result.prepare_model(model), result.dataloader(train_loader))
    """
    started = time.perf_counter()
    if (package := next((p for p in LIGHTNING_PACKAGES if isinstance(model, p.LightningModule)), None)) is None:
        raise TypeError(f"tune(): model must be a LightningModule, got {type(model).__name__}.")
    check_trainer_kwargs(trainer_kwargs, "tune()", [package.Trainer], own=tune)
    asked = {"precisions": precisions, "channels_last": channels_last, "compile": compile, "num_workers": num_workers}
    numbers = {"budget": budget, "max_seconds": max_seconds, "min_gain": min_gain, "planned_steps": planned_steps}
    accelerator = str(trainer_kwargs.get("accelerator", "auto"))
    cuda = accelerator in ("cuda", "gpu") or accelerator == "auto" and torch.cuda.is_available()
    _check(asked, numbers, trainer_kwargs, cuda)
    if isinstance(train_dataloaders, package.LightningDataModule) and datamodule is None:
        train_dataloaders, datamodule = None, train_dataloaders  # tune(model, dm), as trainer.fit(model, dm)
    if train_dataloaders is not None and datamodule is not None:
        raise ValueError("tune(): pass train_dataloaders or one datamodule, not both; tune() takes no validation data.")
    with same_state():  # the data hooks, the first sample and the fits may draw from the global RNGs
        loader = _training_loader(model, train_dataloaders, datamodule)
        callbacks = cbs if isinstance(cbs := trainer_kwargs.get("callbacks") or [], (list, tuple)) else [cbs]
        cl = any(isinstance(c, ChannelsLast) for c in callbacks)
        precision = str(trainer_kwargs.get("precision") or "32-true")
        options, defaults, notes = _options("cuda" if cuda else "cpu", precision, asked, loader)
        current = Candidate(precision, cl, num_workers=loader.num_workers if options["num_workers"] else None)
        kept, dropped = kept_callbacks(callbacks, package)
        notes += [f"not in the measuring fits: {', '.join(sorted(set(dropped)))} (see callbacks.roles)"] * bool(dropped)
        planned = _planned(trainer_kwargs, loader, planned_steps)
        fp, unreadable = fingerprint(model, loader, kept, trainer_kwargs, [options, min_gain, repr(asked)])
        notes += [f"measured, neither reused nor stored: {part} could not be read" for part in unreadable * cache]
        store = Store(fp, cache, unreadable)
        if (result := store.load(planned, budget, max_seconds)) is not None:
            result.reused_from, result.tuning_s = str(store.path), time.perf_counter() - started
        else:
            trials = Trials(model, train_dataloaders, datamodule, loader, trainer_kwargs, package, kept)
            trials.layouts, trials.workers = bool(options["channels_last"]) or cl, options["num_workers"]
            trials.started = started  # the budget counts from the call, as tuning_s does
            gen = search(current, options, defaults, trials.pair_cost, budget, max_seconds, min_gain)
            result = TuneResult(current, *trials.run(gen, planned), time.perf_counter() - started, notes=notes)
            result.machine, result.arch = (store.fp or {}).get("machine", {}), (store.fp or {}).get("arch", "")
            size = f"tune() measured the loader's batch size ({result.baseline.batch_size}); your BatchSizeFinder"
            result.notes += [f"{size} may choose another, with other step times"] * ("BatchSizeFinder" in dropped)
            store.save(result)
    if verbose:
        rank_zero_only(print)(result)
    return result
