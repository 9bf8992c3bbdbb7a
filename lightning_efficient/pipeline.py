"""The batch pipeline: what this package's callbacks do to each batch on the device, and in which order.

Lightning callbacks cannot replace a batch: only the return values of the transfer hooks of the LightningModule
or LightningDataModule do (a DataModule's override wins; ``pytorch_lightning.core.module._call_batch_hook`` and
``trainer/connectors/data_connector.py::_DataHookSelector``). :class:`GPUDecode`, :class:`GPUAugmentation` and
:class:`ChannelsLast` must nevertheless transform the batch once it is on the device, so each adds a named
*stage* to one :class:`BatchPipeline`. The pipeline wraps ``on_after_batch_transfer`` of the object Lightning
calls (:func:`hook_owner`) and runs, for every batch of every stage (train, validation, sanity check, test,
predict), in this fixed order, whatever the order of the Trainer's ``callbacks`` list::

    transfer_batch_to_device (Lightning)
    on_after_batch_transfer, wrapped by the pipeline:
        1. "decode"  stages   GPUDecode: EncodedImages -> uint8 [B, 3, H, W] on the device
        2. the user's own on_after_batch_transfer (the module's or datamodule's; identity if not overridden)
        3. "resize"  stages   ProgressiveResize: training images to the scheduled side (training only)
        4. "augment" stages   GPUAugmentation: uint8 -> float in [0, 1], augment (training only), normalise, cast
        5. "layout"  stages   ChannelsLast: floating-point 4-D tensors -> torch.channels_last
    on_train_batch_start (callbacks), then training_step / validation_step / ...

Why this order:

* **Decoding before the user's hook.** ``FastImageFolder(backend="nvjpeg")`` yields
  :class:`~lightning_efficient.data.EncodedImages` (file bytes), which have no tensor API. A user's hook written
  for image tensors therefore sees the same ``uint8 [B, 3, H, W]`` device tensor with ``backend="nvjpeg"`` as with
  ``backend="pil"``: switching the backend does not change what user code receives.
* **Augmentation and layout after the user's hook.** The user's hook may change the batch (e.g. build the dict
  that ``image_key=`` refers to, or add tensors) and the augmentation must see the result; the layout conversion
  runs last because Kornia and user code return NCHW tensors. This is the order the package always used.

Stages of one kind run in the order they were added. Call ``print(get_pipeline(trainer))`` to see what runs
(:meth:`BatchPipeline.describe`).

Mechanics: the wrapper is installed at instance level (``owner.__dict__["on_after_batch_transfer"]``; Lightning
looks hooks up with ``getattr``) on the datamodule if it overrides the hook, else on the LightningModule, and
carries :func:`functools.wraps` of the user's hook, so Lightning's ``is_overridden`` still sees the user's code
(or its absence). The user's hook (and any instance attribute set before) is restored when the last stage is
removed (the callbacks remove theirs in ``teardown``). The hook runs outside autocast (Lightning enters autocast
only around the ``*_step`` methods).

Timing: :attr:`BatchPipeline.seconds` sums the host (``time.perf_counter``) seconds spent in the stages; an
object with ``start()`` and ``stop()`` methods attached with :meth:`BatchPipeline.add_clock` is called around the
stages too (e.g. to record CUDA events, which measure device time that host seconds miss for asynchronous
kernels). The time of the user's own hook is not included.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Optional, Protocol

__all__ = [
    "BEFORE_USER_HOOK",
    "STAGE_KINDS",
    "BatchPipeline",
    "BatchTransform",
    "StageTimer",
    "Stage",
    "add_stage",
    "get_pipeline",
    "hook_owner",
    "overrides_hook",
]

BatchTransform = Callable[[Any, int], Any]
"""A stage's function: ``fn(batch, dataloader_idx) -> batch`` (the same signature as ``on_after_batch_transfer``)."""

#: Kinds of stage, in the order they run.
STAGE_KINDS: tuple[str, ...] = ("decode", "resize", "augment", "layout")
#: Kinds that run before the user's own ``on_after_batch_transfer``; the others run after it.
BEFORE_USER_HOOK: frozenset[str] = frozenset({"decode"})

HOOK = "on_after_batch_transfer"
_ATTR = "_lightning_efficient_batch_pipeline"
# Where Lightning's base implementations (`DataHooks`) live, in `pytorch_lightning` and the unified `lightning`.
_BASE_MODULES = ("pytorch_lightning.core.hooks", "lightning.pytorch.core.hooks")


class StageTimer(Protocol):
    """What :meth:`BatchPipeline.add_clock` accepts: ``start()`` before and ``stop()`` after a run of stages (a
    :class:`~lightning_efficient.functional.timing.StepTimeline`, which takes its marks from its
    :class:`~lightning_efficient.functional.timing.Clock`, the package's one clock protocol)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Stage:
    """One named step of a :class:`BatchPipeline`.

    Attributes:
        name: unique within a pipeline, e.g. ``"gpu_decode"``, ``"gpu_augmentation"``, ``"channels_last"``.
        kind: one of :data:`STAGE_KINDS`; decides when the stage runs.
        fn: ``fn(batch, dataloader_idx) -> batch``.
    """

    name: str
    kind: str
    fn: BatchTransform

    @property
    def before_user_hook(self) -> bool:
        """Whether the stage runs before the user's own ``on_after_batch_transfer``."""
        return self.kind in BEFORE_USER_HOOK


def _function_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def overrides_hook(obj: Any, name: str = HOOK) -> bool:
    """Whether ``obj`` (a LightningModule or LightningDataModule) has its own ``name`` hook, not Lightning's.

    Unlike ``pytorch_lightning.utilities.model_helpers.is_overridden`` this works for objects of both
    ``pytorch_lightning`` and the unified ``lightning.pytorch`` package (``is_overridden`` raises
    ``ValueError: Expected a parent`` for the other package's classes): the hook found on ``obj`` (unwrapped once
    through ``__wrapped__``, as Lightning does, so a :class:`BatchPipeline` wrapper counts as what it wraps) is
    compared by defining class and module with Lightning's ``DataHooks`` base implementation. Only meant for the
    three transfer hooks (``on_before_batch_transfer``, ``transfer_batch_to_device``,
    ``on_after_batch_transfer``). Returns ``False`` for ``None`` and for objects without the hook.
    """
    hook = getattr(obj, name, None) if obj is not None else None
    if hook is None:
        return False
    hook = getattr(hook, "__wrapped__", hook)
    hook = getattr(hook, "__func__", hook)
    return not (
        getattr(hook, "__qualname__", None) == f"DataHooks.{name}"
        and getattr(hook, "__module__", None) in _BASE_MODULES
    )


def hook_owner(trainer: Any, pl_module: Any) -> Any:
    """The object whose ``on_after_batch_transfer`` Lightning calls: the trainer's datamodule if it overrides
    the hook (:func:`overrides_hook`), else ``pl_module``; the rule of Lightning's ``_DataHookSelector``."""
    datamodule = getattr(trainer, "datamodule", None)
    return datamodule if overrides_hook(datamodule) else pl_module


class BatchPipeline:
    """The named stages run on each batch inside ``on_after_batch_transfer`` of one module or datamodule.

    Get one with :func:`add_stage` (callbacks) or :func:`get_pipeline` (to inspect it); ``print(pipeline)`` shows
    what runs in which order (see the module docstring for the order and why). It installs itself on its
    ``owner`` when created by :func:`add_stage` and uninstalls itself, restoring the user's hook, when its last
    stage is removed.

    Attributes:
        owner: the LightningModule or LightningDataModule whose hook is wrapped.
        user_hook: the hook that was in place before (the user's override, or Lightning's identity).
        seconds: host seconds (``time.perf_counter``) spent in the stages so far, summed over all batches;
            excludes the user's hook. On CUDA the stages mostly enqueue kernels, so this is launch time unless a
            stage synchronises; attach a :class:`StageTimer` for device time.
        batches: batches that went through the wrapped hook.
        image_scale: the side of the current batch's images over their final side, set by a ``"resize"`` stage
            (:class:`~lightning_efficient.ProgressiveResize`) for each training batch, 1.0 otherwise: later stages
            scale what they do in pixels by it (``GPUAugmentation``'s translations).
    """

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.user_hook: Callable[[Any, int], Any] = getattr(owner, HOOK)
        # An instance-level attribute set before us (by the user or another library), restored at removal.
        self._previous = owner.__dict__.get(HOOK)
        self._stages: dict[str, Stage] = {}
        self._clocks: list[StageTimer] = []
        self.seconds = 0.0
        self.batches = 0
        self.image_scale = 1.0
        self.installed = False

        @functools.wraps(self.user_hook)
        def on_after_batch_transfer(batch: Any, dataloader_idx: int) -> Any:
            return self.run(batch, dataloader_idx)

        self._wrapper = on_after_batch_transfer

    # ------------------------------------------------------------------------------------------- stages
    @property
    def stages(self) -> list[Stage]:
        """The stages in the order they run (by :data:`STAGE_KINDS`, then in the order they were added)."""
        return sorted(self._stages.values(), key=lambda s: STAGE_KINDS.index(s.kind))

    def names(self) -> list[str]:
        """Names of the stages in the order they run."""
        return [stage.name for stage in self.stages]

    def add(self, name: str, fn: BatchTransform, kind: str) -> Stage:
        """Add (or, for an existing ``name``, replace and move to the end of its kind) a stage; returns it.

        Args:
            name: the stage's name, e.g. ``"channels_last"``.
            fn: ``fn(batch, dataloader_idx)`` returning the new batch.
            kind: one of :data:`STAGE_KINDS`: where in the order the stage runs.

        Raises:
            ValueError: ``kind`` is not one of :data:`STAGE_KINDS`.
            TypeError: ``fn`` is not callable.
            RuntimeError: the pipeline was uninstalled (its last stage removed); get a new one with
                :func:`add_stage`.
        """
        if kind not in STAGE_KINDS:
            raise ValueError(f"BatchPipeline: stage kind must be one of {STAGE_KINDS}, got {kind!r}.")
        if not callable(fn):
            raise TypeError(f"BatchPipeline: stage {name!r} needs a callable fn(batch, dataloader_idx), got {fn!r}.")
        if not self.installed:
            raise RuntimeError("BatchPipeline: this pipeline was uninstalled; use add_stage() to get the current one.")
        self._stages.pop(name, None)
        stage = self._stages[name] = Stage(name, kind, fn)
        return stage

    def remove(self, name: str) -> None:
        """Remove the stage ``name`` (no error if absent); the last removal uninstalls the pipeline.

        Args:
            name: the stage's name, as given to :meth:`add`.
        """
        self._stages.pop(name, None)
        if not self._stages and self.installed:
            self._uninstall()

    def _install(self) -> None:
        self.owner.__dict__[_ATTR] = self
        self.owner.__dict__[HOOK] = self._wrapper
        self.installed = True

    def _uninstall(self) -> None:
        self.owner.__dict__.pop(_ATTR, None)
        if self._previous is None:
            self.owner.__dict__.pop(HOOK, None)
        else:
            self.owner.__dict__[HOOK] = self._previous
        self.installed = False

    # ------------------------------------------------------------------------------------------- timing
    def add_clock(self, clock: StageTimer) -> None:
        """Call ``clock.start()`` / ``clock.stop()`` around every run of stages (no-op if already attached).

        A run is the stages before the user's hook, or those after it: a batch gives a clock zero, one or two
        ``start``/``stop`` pairs (two with ``GPUDecode`` and a later stage), so a clock should sum its intervals.
        ``stop`` is called even when a stage raises.

        Args:
            clock: a :class:`StageTimer` (any object with ``start()`` and ``stop()``).
        """
        if not (callable(getattr(clock, "start", None)) and callable(getattr(clock, "stop", None))):
            raise TypeError(f"BatchPipeline.add_clock needs an object with start() and stop(), got {clock!r}.")
        if all(c is not clock for c in self._clocks):
            self._clocks.append(clock)

    def remove_clock(self, clock: StageTimer) -> None:
        """Detach ``clock`` (no error if it was not attached).

        Args:
            clock: the clock given to :meth:`add_clock`.
        """
        self._clocks = [c for c in self._clocks if c is not clock]

    # ------------------------------------------------------------------------------------------- running
    def _run_stages(self, stages: list[Stage], batch: Any, dataloader_idx: int) -> Any:
        if not stages:
            return batch
        clocks = list(self._clocks)
        start = time.perf_counter()
        for clock in clocks:
            clock.start()
        try:
            for stage in stages:
                batch = stage.fn(batch, dataloader_idx)
        finally:
            for clock in reversed(clocks):
                clock.stop()
            self.seconds += time.perf_counter() - start
        return batch

    def run(self, batch: Any, dataloader_idx: int = 0) -> Any:
        """What the wrapped hook does: the "before" stages, the user's hook, then the other stages.

        Args:
            batch: the batch on the device, as Lightning passes it to ``on_after_batch_transfer``.
            dataloader_idx: the index of the dataloader it came from.
        """
        stages = self.stages
        self.batches += 1
        self.image_scale = 1.0  # until a resize stage says otherwise for this batch
        batch = self._run_stages([s for s in stages if s.before_user_hook], batch, dataloader_idx)
        batch = self.user_hook(batch, dataloader_idx)
        return self._run_stages([s for s in stages if not s.before_user_hook], batch, dataloader_idx)

    def describe(self) -> str:
        """The steps each batch goes through, one per line, in order (what ``str(pipeline)`` prints)."""
        user = _function_name(self.user_hook)
        user += "" if overrides_hook(self.owner) else " (not overridden: identity)"
        lines = [
            f"BatchPipeline on {type(self.owner).__qualname__}.{HOOK}{'' if self.installed else ' (uninstalled)'}:"
        ]
        steps = [(s.kind, s.name, _function_name(s.fn)) for s in self.stages if s.before_user_hook]
        steps.append(("user", "on_after_batch_transfer", user))
        steps += [(s.kind, s.name, _function_name(s.fn)) for s in self.stages if not s.before_user_hook]
        lines += [f"  {i}. {kind:<7} {name:<24} {fn}" for i, (kind, name, fn) in enumerate(steps, 1)]
        lines.append(f"  {self.batches} batches, {self.seconds:.3f} s in stages (host), {len(self._clocks)} clock(s)")
        return "\n".join(lines)

    __str__ = describe

    def __repr__(self) -> str:
        return f"BatchPipeline(owner={type(self.owner).__qualname__}, stages={self.names()})"


def _installed(obj: Any) -> Optional[BatchPipeline]:
    return getattr(obj, "__dict__", {}).get(_ATTR) if obj is not None else None


def get_pipeline(obj: Any) -> Optional[BatchPipeline]:
    """The :class:`BatchPipeline` installed on ``obj``, or ``None``.

    Args:
        obj: a ``Trainer`` (its datamodule's pipeline, else its LightningModule's), a LightningModule or a
            LightningDataModule.
    """
    for candidate in (obj, getattr(obj, "datamodule", None), getattr(obj, "lightning_module", None)):
        pipeline = _installed(candidate)
        if pipeline is not None:
            return pipeline
    return None


def add_stage(trainer: Any, pl_module: Any, name: str, fn: BatchTransform, kind: str) -> BatchPipeline:
    """Add a stage to the pipeline of the object Lightning calls (:func:`hook_owner`), installing it if needed.

    Call it from a callback's ``setup`` and remove the stage in ``teardown`` with ``pipeline.remove(name)``.

    Args:
        trainer: the Trainer (its ``datamodule`` is consulted).
        pl_module: the LightningModule.
        name: the stage's name; adding an existing name replaces that stage.
        fn: ``fn(batch, dataloader_idx) -> batch``.
        kind: one of :data:`STAGE_KINDS`.

    Returns:
        The pipeline (keep it to remove the stage).

    Raises:
        ValueError: unknown ``kind``.
        TypeError: ``fn`` not callable.
    """
    owner = hook_owner(trainer, pl_module)
    pipeline = _installed(owner)
    if pipeline is None:
        pipeline = BatchPipeline(owner)
        pipeline._install()
    try:
        pipeline.add(name, fn, kind)
    except (TypeError, ValueError):
        if not pipeline._stages:  # this call created it and could not fill it
            pipeline._uninstall()
        raise
    return pipeline
