"""Chain batch transforms into Lightning's ``on_after_batch_transfer``.

Lightning callbacks cannot replace a batch: only the return values of the transfer hooks of the
LightningModule or LightningDataModule do (a DataModule's override wins; see
``pytorch_lightning.core.module._call_batch_hook``). Several of our callbacks need to transform the batch
once it is on the device (``GPUAugmentation`` augments it, ``ChannelsLast`` changes its memory layout), and
their result must not depend on the order the user lists the callbacks in. So every callback registers a
transform here with an ``order``; one wrapper, installed at instance level on whichever object Lightning
calls (module or datamodule), first calls the user's own hook, then the transforms by ascending ``order``.
The wrapper is removed, and the user's hook restored, when the last transform is removed.

The wrapper uses :func:`functools.wraps`, so Lightning's ``is_overridden`` checks still see the user's code.
The hook runs outside autocast (Lightning enters autocast only around ``training_step``).
"""

from __future__ import annotations

import functools
import itertools
import time
from typing import Any, Callable, Union

import pytorch_lightning as pl
from pytorch_lightning.utilities.model_helpers import is_overridden

BatchTransform = Callable[[Any, int], Any]
"""``fn(batch, dataloader_idx) -> batch``, called after the user's ``on_after_batch_transfer``."""

HookOwner = Union["pl.LightningModule", "pl.LightningDataModule"]

#: Orders used by this package: decoding first, then augmentation, memory layout last (Kornia returns NCHW).
ORDER_DECODE = -1000
ORDER_AUGMENTATION = 0
ORDER_LAYOUT = 1000

_ATTR = "_lightning_efficient_batch_hook"
_HOOK = "on_after_batch_transfer"
_counter = itertools.count()


class _Chain:
    def __init__(self, owner: Any) -> None:
        self.owner = owner
        # An instance-level attribute the user (or another library) set before us, restored at removal.
        self.previous = owner.__dict__.get(_HOOK)
        self.original = getattr(owner, _HOOK)
        self.transforms: dict[str, tuple[int, int, BatchTransform]] = {}
        #: Host seconds spent in the registered transforms, summed over all calls (read by EfficiencyReport).
        self.seconds = 0.0

        @functools.wraps(self.original)
        def on_after_batch_transfer(batch: Any, dataloader_idx: int) -> Any:
            batch = self.original(batch, dataloader_idx)
            start = time.perf_counter()
            for _, _, fn in sorted(self.transforms.values(), key=lambda t: (t[0], t[1])):
                batch = fn(batch, dataloader_idx)
            self.seconds += time.perf_counter() - start
            return batch

        self.wrapper = on_after_batch_transfer


def hook_owner(trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> HookOwner:
    """The object whose ``on_after_batch_transfer`` Lightning calls: the datamodule if it overrides it."""
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and is_overridden(_HOOK, datamodule):
        return datamodule
    return pl_module


def add_batch_transform(
    trainer: "pl.Trainer", pl_module: "pl.LightningModule", name: str, fn: BatchTransform, order: int
) -> HookOwner:
    """Register ``fn`` to run on every batch after it reaches the device; returns the hook's owner.

    Registering the same ``name`` again replaces the earlier transform. Transforms with equal ``order`` run in
    registration order.
    """
    owner = hook_owner(trainer, pl_module)
    chain = owner.__dict__.get(_ATTR)
    if chain is None:
        chain = _Chain(owner)
        owner.__dict__[_ATTR] = chain
        owner.__dict__[_HOOK] = chain.wrapper
    chain.transforms[name] = (order, next(_counter), fn)
    return owner


def remove_batch_transform(owner: HookOwner | None, name: str) -> None:
    """Unregister ``name``; restores the owner's own hook once no transform is left. Idempotent."""
    if owner is None:
        return
    chain = owner.__dict__.get(_ATTR)
    if chain is None:
        return
    chain.transforms.pop(name, None)
    if chain.transforms:
        return
    del owner.__dict__[_ATTR]
    if chain.previous is None:
        owner.__dict__.pop(_HOOK, None)
    else:
        owner.__dict__[_HOOK] = chain.previous


def registered_transforms(owner: HookOwner) -> list[str]:
    """Names of the transforms registered on ``owner``, in the order they run."""
    chain = owner.__dict__.get(_ATTR)
    if chain is None:
        return []
    return [name for name, _ in sorted(chain.transforms.items(), key=lambda kv: (kv[1][0], kv[1][1]))]


def transform_seconds(owner: HookOwner | None) -> float:
    """Host seconds spent so far in the transforms registered on ``owner`` (0.0 where none are)."""
    chain = None if owner is None else owner.__dict__.get(_ATTR)
    return 0.0 if chain is None else chain.seconds
