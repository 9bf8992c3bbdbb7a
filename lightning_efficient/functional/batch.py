"""Find and replace one entry of a batch: the one home for "where are the images in this batch".

Batches come as a bare tensor, a tuple/list (``(images, targets)``, namedtuples included) or a mapping
(``{"image": ..., "mask": ...}``). The callbacks that transform images on the device (``GPUDecode``,
``GPUAugmentation``) locate their input with :func:`get_entry` and return a batch of the same structure with
:func:`replace_entry`, which never mutates the batch it was given.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict, defaultdict
from collections.abc import Mapping, MutableMapping, Sequence
from functools import cached_property
from typing import Any, Callable, Union

Key = Union[int, str]
"""An index into a tuple/list batch or a key of a mapping batch."""


def get_entry(batch: Any, key: Key, *, who: str, option: str = "image_key", bare_ok: bool = True) -> Any:
    """The entry of ``batch`` at ``key``.

    Args:
        batch: a tensor (returned whole when ``bare_ok``), a tuple/list, or a mapping.
        key: index (tuple/list) or key (mapping).
        who: the name of the caller, used in error messages (e.g. ``"GPUAugmentation"``).
        option: the caller's argument that holds ``key``, named in error messages as the fix.
        bare_ok: whether a batch that is not a container is itself the entry (the images of a bare-tensor
            batch). Otherwise such a batch raises.

    Returns:
        The entry, unchanged (the caller checks its type and shape).

    Raises:
        ValueError: a mapping without ``key``, an index out of range or not an int for a tuple/list, or a batch
            type that holds no entries; the message names ``who`` and ``option``.
    """
    if isinstance(batch, Mapping):
        if key not in batch:
            raise ValueError(
                f"{who}: the batch dict has no {key!r} (keys: {sorted(map(str, batch))}); "
                f"set `{option}=` to the right key."
            )
        return batch[key]
    if isinstance(batch, (tuple, list)):
        if not isinstance(key, int) or isinstance(key, bool) or not -len(batch) <= key < len(batch):
            raise ValueError(
                f"{who}: `{option}={key!r}` is not a valid index into a batch of {len(batch)} items; "
                f"set `{option}=` to the position of the entry."
            )
        return batch[key]
    if bare_ok:
        return batch
    raise ValueError(
        f"{who}: cannot find `{option}={key!r}` in a batch of type {type(batch).__name__}; "
        f"use a tuple/list or a dict batch."
    )


def replace_entry(batch: Any, key: Key, value: Any) -> Any:
    """A batch of the same structure as ``batch`` with the entry at ``key`` replaced by ``value``.

    Tuples stay tuples, namedtuples stay namedtuples, lists stay lists, mappings keep their class (shallow
    copy); a batch that is not a container is replaced whole. ``batch`` itself is not modified.
    """
    if isinstance(batch, Mapping):
        new = copy.copy(batch)
        if not isinstance(new, MutableMapping):
            raise TypeError(f"cannot replace {key!r} in a read-only mapping batch of type {type(batch).__name__}")
        new[key] = value
        return new
    if isinstance(batch, (tuple, list)):
        if not isinstance(key, int):
            raise TypeError(f"a {type(batch).__name__} batch is indexed by position, not by {key!r}")
        items = list(batch)
        items[key] = value
        if isinstance(batch, list):
            return items
        if hasattr(batch, "_fields"):  # namedtuple
            return type(batch)(*items)
        return type(batch)(items)
    return value


def map_tensors(batch: Any, kind: Union[type, tuple[type, ...]], function: Callable[[Any], Any]) -> Any:
    """``batch`` with ``function(x)`` in place of every element ``x`` of type ``kind``, in containers of the same
    structure, as Lightning's ``apply_to_collection`` rebuilds them (without Lightning): mappings keep their class
    (a ``defaultdict`` its factory), sequences and namedtuples theirs, dataclasses are deep-copied with their
    ``init`` fields mapped (a frozen one raises ``ValueError``: map it as a ``kind`` of its own); strings and other
    objects stay as they are."""
    if isinstance(batch, kind):
        return function(batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        fields = {f.name: (getattr(batch, f.name), f.init) for f in dataclasses.fields(batch)}
        result = copy.deepcopy(batch, memo={id(value): value for value, _ in fields.values()})
        for name, (value, init) in fields.items():
            try:
                setattr(result, name, map_tensors(value, kind, function) if init else value)
            except dataclasses.FrozenInstanceError as err:
                raise ValueError("map_tensors: a frozen dataclass; map it as a kind of its own") from err
        cached = [k for k in vars(type(batch)) if isinstance(getattr(type(batch), k), cached_property)]
        for name in cached:
            vars(result).pop(name, None)
        return result
    if isinstance(batch, Mapping):
        items = OrderedDict((k, map_tensors(v, kind, function)) for k, v in batch.items())
        if isinstance(batch, defaultdict):
            return type(batch)(batch.default_factory, items)
        return type(batch)(items)  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields") and hasattr(batch, "_asdict"):
        return type(batch)(*(map_tensors(v, kind, function) for v in batch))
    if isinstance(batch, Sequence) and not isinstance(batch, str):
        return type(batch)([map_tensors(v, kind, function) for v in batch])  # type: ignore[call-arg]
    return batch
