"""``recipe()``: the Trainer keyword arguments that turn every practice on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from pytorch_lightning import Callback

from lightning_efficient.adapter import check_trainer_kwargs
from lightning_efficient.callbacks.channels_last import ChannelsLast
from lightning_efficient.callbacks.efficiency_report import EfficiencyReport
from lightning_efficient.callbacks.gpu_augmentation import GPUAugmentation
from lightning_efficient.callbacks.progressive_resize import ProgressiveResize
from lightning_efficient.callbacks.stepwise_lr import StepwiseLR
from lightning_efficient.precision import recommended_precision

if TYPE_CHECKING:
    from lightning_efficient.tuning.result import TuneResult


def recipe(
    *,
    precision: Optional[str] = None,
    accelerator: str = "auto",
    channels_last: Optional[bool] = None,
    stepwise_lr: bool = True,
    efficiency_report: bool = True,
    augmentation: Union[None, str, Any] = None,
    progressive_resize: Union[bool, Any] = False,
    callbacks: Sequence[Callback] = (),
    tune: Optional[TuneResult] = None,
    **trainer_kwargs: Any,
) -> dict[str, Any]:
    """Keyword arguments for ``Trainer(**recipe())``: precision and the callbacks of this package.

    The same for both Lightning packages: ``pytorch_lightning.Trainer(**recipe())`` and, with the unified
    package, ``lightning.pytorch.Trainer(**recipe())`` (``import lightning as L; L.Trainer(**recipe())``); the
    callbacks are instances of both packages' ``Callback``.

    What it turns on: :func:`~lightning_efficient.recommended_precision` (e.g. ``bf16-mixed``),
    :class:`~lightning_efficient.ChannelsLast`, :class:`~lightning_efficient.StepwiseLR`,
    :class:`~lightning_efficient.EfficiencyReport`; augmentation on the device is opt-in because it changes
    what the model sees (pass ``augmentation="trivial_augment"`` or a :class:`GPUAugmentation`).

    With ``tune=`` the result of :func:`~lightning_efficient.tune`, the precision and ``ChannelsLast`` are the
    measured choice instead of the hardware's rule (compiling and ``num_workers`` are applied to the model and
    loader: ``result.prepare_model(model)``, ``result.dataloader(loader)``).

    Args:
        precision: Lightning precision string; default: ``tune``'s choice, else recommended for ``accelerator``.
        accelerator: passed to :func:`recommended_precision` and, unless ``"auto"``, to the Trainer.
        channels_last: include :class:`ChannelsLast`; default: ``tune``'s choice, else ``True``.
        stepwise_lr: include :class:`~lightning_efficient.StepwiseLR` (LR schedulers stepped per optimizer step).
        efficiency_report: include :class:`~lightning_efficient.EfficiencyReport` (where the time goes).
        augmentation: None, a preset name or module for :class:`GPUAugmentation`, or a ready
            :class:`GPUAugmentation` instance.
        progressive_resize: ``True`` for :class:`~lightning_efficient.ProgressiveResize` with its defaults, or a ready
            instance; off by default (it changes what the model sees).
        callbacks: your own callbacks (of either Lightning package), kept first, in order. One of this package's
            (e.g. ``StepwiseLR(steps_per_epoch=100)``) replaces the copy ``recipe()`` would add.
        tune: a :class:`~lightning_efficient.TuneResult`, whose measured choice sets the defaults above.
        **trainer_kwargs: any other ``Trainer`` argument (e.g. ``max_epochs=10``), passed through.

    Returns:
        A dict with ``precision``, ``callbacks`` and the given Trainer arguments.

    Raises:
        TypeError: a keyword that no installed Lightning ``Trainer`` takes (the message names the close ones).
        ValueError: an unknown accelerator name.
        TypeError: ``tune`` is not a :class:`~lightning_efficient.TuneResult`, ``progressive_resize`` is neither a
            bool nor a :class:`~lightning_efficient.ProgressiveResize`, or ``callbacks`` is not a list of callbacks.

    Example:
        ```python
        kwargs = recipe(augmentation="trivial_augment")
        trainer = pl.Trainer(max_epochs=10, **kwargs)

        result = tune(model, loader, max_epochs=10)  # measured settings
        trainer = pl.Trainer(max_epochs=10, **recipe(tune=result))
        ```
    """
    check_trainer_kwargs(trainer_kwargs, "recipe()", own=recipe)
    if tune is not None:
        if not all(hasattr(tune, a) for a in ("recipe_kwargs", "chosen")):
            raise TypeError(
                f"recipe(tune=...): expected the TuneResult that tune() returns, got {type(tune).__name__}."
            )
        tuned = tune.recipe_kwargs()
        precision = tuned["precision"] if precision is None else precision
        channels_last = tuned["channels_last"] if channels_last is None else channels_last
    if channels_last is None:
        channels_last = True
    out: dict[str, Any] = dict(trainer_kwargs)
    out["precision"] = precision if precision is not None else recommended_precision(accelerator)
    if accelerator != "auto":
        out["accelerator"] = accelerator
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(
            f"recipe(callbacks={type(callbacks).__name__}(...)): expected a list of callbacks, "
            f"e.g. recipe(callbacks=[{type(callbacks).__name__}(...)])."
        )
    cbs: list[Callback] = list(callbacks)
    given = {type(c) for c in cbs}
    if augmentation is not None:
        cbs.append(augmentation if isinstance(augmentation, GPUAugmentation) else GPUAugmentation(augmentation))
    if not isinstance(progressive_resize, (bool, ProgressiveResize)):
        raise TypeError(
            f"recipe(progressive_resize={progressive_resize!r}): expected True, False or a ProgressiveResize."
        )
    if progressive_resize:
        cbs.append(progressive_resize if isinstance(progressive_resize, ProgressiveResize) else ProgressiveResize())
    if channels_last and ChannelsLast not in given:
        cbs.append(ChannelsLast())
    if stepwise_lr and StepwiseLR not in given:
        cbs.append(StepwiseLR())
    if efficiency_report and EfficiencyReport not in given:
        cbs.append(EfficiencyReport(tuned=tune))
    out["callbacks"] = cbs
    return out
