"""Find and replace one entry of a batch: the one home for "where are the images in this batch".

Batches come as a bare tensor, a tuple/list (``(images, targets)``, namedtuples included) or a mapping
(``{"image": ..., "mask": ...}``). The callbacks that transform images on the device (``GPUDecode``,
``GPUAugmentation``) locate their input with :func:`get_entry` and return a batch of the same structure with
:func:`replace_entry`, which never mutates the batch it was given.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from typing import Any, Union

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
