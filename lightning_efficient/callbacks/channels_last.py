"""``ChannelsLast``: the model's conv weights and every 4-D float batch tensor in ``torch.channels_last`` (NHWC)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_warn

from lightning_efficient.adapter import Callback
from lightning_efficient.functional.layout import (
    BatchToChannelsLast,
    ConversionReport,
    ExcludeSpec,
    FiveDPolicy,
    check_five_d,
    convert_module_to_channels_last,
    layout_error_note,
    parse_exclude,
)
from lightning_efficient.pipeline import BatchPipeline, add_stage

__all__ = ["ChannelsLast", "ChannelsLastReport"]

_STAGE_NAME = "channels_last"


@dataclasses.dataclass(frozen=True)
class ChannelsLastReport:
    """What a :class:`ChannelsLast` callback did in this process (counts are cumulative over all stages).

    Attributes:
        model: the :class:`~lightning_efficient.functional.layout.ConversionReport` of the latest ``setup``
            (``None`` before ``setup`` or with ``convert_model=False``). On a second ``fit``/``test`` call the
            tensors converted the first time are listed under ``already``.
        batches: batches (train, validation, sanity check, test, predict) passed through the layout transform.
        batch_tensors_converted: floating-point 4-D batch tensors copied to channels_last.
        batch_tensors_already: floating-point 4-D batch tensors that arrived channels_last already.
    """

    model: Optional[ConversionReport] = None
    batches: int = 0
    batch_tensors_converted: int = 0
    batch_tensors_already: int = 0

    def summary(self) -> str:
        """One line for logs and the efficiency report."""
        model = self.model.summary() if self.model is not None else "model not converted"
        return (
            f"ChannelsLast: model: {model}; batches: {self.batches} "
            f"({self.batch_tensors_converted} tensors converted, {self.batch_tensors_already} already channels_last)"
        )


class ChannelsLast(Callback):
    r"""Train in ``torch.channels_last`` (NHWC) memory layout: model conv weights once, every batch on the device.

    In ``setup`` (before Lightning moves the model to the device and wraps it in DDP/FSDP) the LightningModule's
    floating-point 4-D parameters and buffers are converted in place with
    :func:`~lightning_efficient.functional.layout.convert_module_to_channels_last`: the ``nn.Parameter`` objects
    stay the same, so optimizers see them, and the layout survives the move to the device. Then every batch of
    training, validation (and sanity check), test and predict, once on the device, goes through
    :func:`~lightning_efficient.functional.layout.batch_to_channels_last`: each floating-point ``[N, C, H, W]``
    tensor becomes channels_last, with equal values; integer tensors (labels, masks, ``uint8`` images), other
    ranks and the container types, keys and order are kept. The conversion is the ``"layout"`` stage
    ``"channels_last"`` of the :class:`~lightning_efficient.pipeline.BatchPipeline`, so it runs after the user's
    ``on_after_batch_transfer`` and after :class:`GPUAugmentation` (Kornia returns NCHW), whatever the order of
    the callbacks; it is removed again in ``teardown``. The model stays channels_last after ``teardown``.

    The values computed do not change: losses and gradients equal an NCHW run up to floating-point rounding
    (different kernels sum in a different order). The speed-up (for CNNs under ``16-mixed`` / ``bf16-mixed`` on
    Volta and later NVIDIA GPUs, where tensor cores need NHWC) comes from convolutions not transposing their
    inputs; its size depends on model and hardware, so measure it (e.g. with :class:`EfficiencyReport`). Figures
    measured through the Trainer (three CNNs, fp32 and bf16-mixed) are in ``benchmarks/results/channels_last.md``
    (CPU; ``benchmarks/gpu_suite.py`` writes ``gpu/trainer_resnet50.md`` there for CUDA).
    Works with DDP and ``torch.compile``.

    Code written for contiguous NCHW tensors can fail on channels_last activations, typically
    ``h.view(h.size(0), -1)`` before a ``Linear`` (``RuntimeError: view size is not compatible with input tensor's
    size and stride``; use ``torch.flatten(h, 1)``, ``h.reshape(h.size(0), -1)`` or ``nn.Flatten()``, which give the
    same values) or a custom kernel that requires ``is_contiguous()``. When such an error ends ``fit``,
    ``validate``, ``test`` or ``predict``, this callback's ``on_exception`` adds a note naming ChannelsLast and
    the fix to the exception (``exception.add_note``, shown in the traceback; type and message unchanged; see
    :func:`~lightning_efficient.functional.layout.layout_error_note`). Nothing runs per step for this.

    Sources: PyTorch tutorial "Channels Last Memory Format in PyTorch"; NVIDIA "Deep Learning Performance Guide:
    Convolutional Layers" (tensor layouts, NCHW vs NHWC); MosaicML Composer's ``ChannelsLast`` algorithm, which
    converts the model only (``convert_batch=False`` reproduces it).

    Args:
        exclude: modules to leave in their layout: names relative to the LightningModule as in
            ``pl_module.named_modules()`` (e.g. ``"model.head"``) and/or ``nn.Module`` subclasses, e.g.
            ``exclude=("model.head", nn.Conv1d)``. Excluding a module excludes its submodules.
        five_d: policy for 5-D tensors (``Conv3d`` weights): ``"skip"`` (default) leaves them,
            ``"channels_last_3d"`` converts them to ``torch.channels_last_3d``. 5-D batch tensors are never
            converted.
        convert_model: convert the model's parameters and buffers in ``setup`` (default ``True``).
        convert_batch: convert the batches (default ``True``).

    Raises:
        TypeError: an ``exclude`` entry is neither a module name nor an ``nn.Module`` subclass, or a flag is not
            a bool.
        ValueError: ``five_d`` is not ``"skip"`` or ``"channels_last_3d"``, both ``convert_model`` and
            ``convert_batch`` are ``False``, or (in ``setup``) an ``exclude`` name matches no submodule.

    Example:
        ```python
        import pytorch_lightning as pl
        from lightning_efficient import ChannelsLast

        channels_last = ChannelsLast(exclude=("model.fc",))
        trainer = pl.Trainer(precision="bf16-mixed", callbacks=[channels_last])
        trainer.fit(model, datamodule)
        print(channels_last.report().summary())
        ```
    """

    def __init__(
        self,
        exclude: ExcludeSpec = (),
        five_d: FiveDPolicy = "skip",
        convert_model: bool = True,
        convert_batch: bool = True,
    ) -> None:
        # Fail early on bad types; names are checked against the model in setup.
        names, types = parse_exclude(exclude)
        self.exclude: tuple = (*names, *types)
        self.five_d = check_five_d(five_d)
        for name, flag in (("convert_model", convert_model), ("convert_batch", convert_batch)):
            if not isinstance(flag, bool):
                raise TypeError(f"`{name}` must be a bool, got {flag!r}.")
        if not (convert_model or convert_batch):
            raise ValueError(
                "ChannelsLast(convert_model=False, convert_batch=False) would do nothing; enable one of them or "
                "drop the callback."
            )
        self.convert_model = convert_model
        self.convert_batch = convert_batch
        self._pipeline: Optional[BatchPipeline] = None
        self._model_report: Optional[ConversionReport] = None
        self._convert = BatchToChannelsLast()

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if self.convert_model:
            report = convert_module_to_channels_last(pl_module, exclude=self.exclude, five_d=self.five_d)
            self._model_report = report
            if not (report.converted or report.already):
                rank_zero_warn(
                    f"ChannelsLast found no floating-point 4-D parameter or buffer in {type(pl_module).__name__} "
                    "outside the excluded modules (lazy modules are converted only once initialized), so the model "
                    "is unchanged."
                )
        if self.convert_batch:
            self._pipeline = add_stage(trainer, pl_module, _STAGE_NAME, self._transform, "layout")

    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if self._pipeline is not None:
            self._pipeline.remove(_STAGE_NAME)
        self._pipeline = None

    def on_exception(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", exception: BaseException) -> None:
        """Add a note naming ChannelsLast and the fix to errors of NCHW-only code on channels_last tensors."""
        note = layout_error_note(exception)
        if note is not None and note not in getattr(exception, "__notes__", ()):
            exception.add_note(note)

    def _transform(self, batch: Any, dataloader_idx: int) -> Any:
        return self._convert(batch)

    def report(self) -> ChannelsLastReport:
        """What this callback did so far in this process (see :class:`ChannelsLastReport`)."""
        return ChannelsLastReport(
            model=self._model_report,
            batches=self._convert.batches,
            batch_tensors_converted=self._convert.converted,
            batch_tensors_already=self._convert.already,
        )
