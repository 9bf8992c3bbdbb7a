"""Memory layout (``torch.channels_last``) for CNN models and batches: the functional core of ``ChannelsLast``.

A 4-D image tensor of logical shape ``[N, C, H, W]`` can be stored in NCHW order (PyTorch's default,
``torch.contiguous_format``, strides ``(C*H*W, H*W, W, 1)``) or in NHWC order (``torch.channels_last``,
strides ``(H*W*C, 1, W*C, C)``); the logical shape, indexing and values are identical, only the order of the
bytes in memory differs. Convolution kernels on tensor cores (cuDNN, oneDNN) work natively on NHWC; fed NCHW
they transpose on every call, so converting the weights once and the inputs once per batch speeds up
mixed-precision CNN training on Volta and later GPUs, and on x86 CPUs through oneDNN (the size of the gain
depends on the model and hardware: measure it, e.g. with ``EfficiencyReport``; figures measured through the
Trainer are in ``benchmarks/results/channels_last.md``).

PyTorch propagates the layout through operators: a convolution whose input or weight is channels_last returns
channels_last, and element-wise ops, norms and pooling preserve it. So it is enough to convert

* the model's 4-D parameters and buffers, once, in place (:func:`convert_module_to_channels_last`), and
* every floating-point 4-D tensor of each batch (:func:`batch_to_channels_last`).

Sources:

* PyTorch tutorial "(beta) Channels Last Memory Format in PyTorch"
  (https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html): semantics, the propagation rules,
  ``Module.to(memory_format=...)``.
* NVIDIA, "Deep Learning Performance Guide: Convolutional Layers", section "Tensor Layouts in Memory: NCHW vs
  NHWC" (https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/): tensor cores need
  NHWC; NCHW inputs are transposed by the library at run time.
* MosaicML Composer's ``ChannelsLast`` algorithm (``composer/algorithms/channels_last``), which converts the
  model only and leaves the inputs NCHW; here the batches are converted as well, so the first convolution does
  not have to transpose its input.

Ambiguous shapes. When ``C == 1`` or ``H == W == 1`` the NCHW and NHWC byte orders coincide, and PyTorch's
``Tensor.is_contiguous(memory_format=torch.channels_last)`` is ``True`` for both. PyTorch then decides the
layout that operators propagate from the strides of the size-1 dimensions (``suggest_memory_format``). So
:func:`is_channels_last` is ``True`` for such a tensor only if its strides are the ones PyTorch gives a
channels_last tensor (``tensor.to(memory_format=torch.channels_last)``); an NCHW tensor of the same shape is
re-strided (a cheap copy) by the conversion. This matters for depthwise convolutions, whose weights
``[C_out, 1, kH, kW]`` always have ``C == 1``. Only ``[N, 1, 1, 1]`` tensors, whose strides are identical in
both layouts, count as both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal, Union

import torch
from torch import Tensor, nn
from torch.nn.parameter import is_lazy

from lightning_efficient.functional.batch import map_tensors

__all__ = [
    "BatchToChannelsLast",
    "ConversionReport",
    "ExcludeSpec",
    "FIVE_D_POLICIES",
    "FiveDPolicy",
    "LAYOUT_NOTE_PREFIX",
    "batch_to_channels_last",
    "check_five_d",
    "convert_module_to_channels_last",
    "is_channels_last",
    "is_channels_last_3d",
    "layout_error_note",
    "parse_exclude",
    "to_channels_last",
    "to_nchw",
]

FiveDPolicy = Literal["skip", "channels_last_3d"]
#: Accepted values of ``five_d``: leave 5-D tensors as they are, or convert them to ``torch.channels_last_3d``.
FIVE_D_POLICIES: tuple[str, ...] = ("skip", "channels_last_3d")

ExcludeSpec = Union[str, type, Iterable[Union[str, type]]]
"""Modules to leave alone: a name as in ``named_modules()``, an ``nn.Module`` subclass, or an iterable of them."""


def _channels_last_strides(shape: torch.Size) -> tuple[int, ...]:
    """Strides PyTorch gives a dense tensor of ``shape`` in channels_last (``channels_last_3d`` for 5-D)."""
    # Channel dimension innermost, then the spatial dimensions from last to first, then N.
    order = [1, *range(len(shape) - 1, 1, -1), 0]
    strides = [0] * len(shape)
    step = 1
    for dim in order:
        strides[dim] = step
        step *= max(shape[dim], 1)
    return tuple(strides)


def _has_layout(tensor: Tensor, ndim: int, memory_format: torch.memory_format) -> bool:
    if tensor.dim() != ndim:
        return False
    if tensor.numel() == 0:
        return True  # no bytes: every layout holds
    if not tensor.is_contiguous(memory_format=memory_format):
        return False
    if not tensor.is_contiguous():
        return True  # unambiguous: dense in the requested order and not in NCHW order
    # Ambiguous (C == 1 or all spatial sizes 1): decide by the strides of the size-1 dimensions, as PyTorch does.
    return tuple(tensor.stride()[1:]) == _channels_last_strides(tensor.shape)[1:]


def is_channels_last(tensor: Tensor) -> bool:
    """Whether ``tensor`` is a 4-D tensor stored in ``torch.channels_last`` (NHWC) order.

    Args:
        tensor: any tensor; any dtype and device.

    Returns:
        ``False`` for tensors that are not 4-D. For a 4-D ``[N, C, H, W]`` tensor: ``True`` if it is dense in NHWC
        order (``tensor.is_contiguous(memory_format=torch.channels_last)``) and, for the ambiguous shapes with
        ``C == 1`` or ``H == W == 1`` (dense in both orders), if its strides are those of
        ``tensor.to(memory_format=torch.channels_last)``, i.e. the ones from which PyTorch's operators propagate
        channels_last. A ``[N, 1, 1, 1]`` tensor and an empty tensor are both NCHW and channels_last.

    Raises:
        TypeError: ``tensor`` is not a ``torch.Tensor``.

    Example:
        ```pycon
        >>> x = torch.zeros(2, 3, 4, 5)
        >>> nhwc = torch.channels_last
        >>> is_channels_last(x), is_channels_last(x.to(memory_format=nhwc))
        (False, True)
        >>> g = torch.zeros(2, 1, 4, 4)  # C == 1: the strides decide
        >>> is_channels_last(g), is_channels_last(g.to(memory_format=nhwc))
        (False, True)
        ```
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"is_channels_last expects a torch.Tensor, got {type(tensor).__name__}.")
    return _has_layout(tensor, 4, torch.channels_last)


def is_channels_last_3d(tensor: Tensor) -> bool:
    """Like :func:`is_channels_last` for 5-D ``[N, C, D, H, W]`` tensors and ``torch.channels_last_3d`` (NDHWC).

    Raises:
        TypeError: ``tensor`` is not a ``torch.Tensor``.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"is_channels_last_3d expects a torch.Tensor, got {type(tensor).__name__}.")
    return _has_layout(tensor, 5, torch.channels_last_3d)


def to_channels_last(tensor: Tensor) -> Tensor:
    """``tensor`` in channels_last order if it is a floating-point 4-D tensor, else ``tensor`` itself.

    Values, shape, dtype, device and ``requires_grad`` are unchanged; a tensor that already
    :func:`is_channels_last` is returned as is (no copy), others are copied with
    ``tensor.to(memory_format=torch.channels_last)`` (differentiable). Integer and bool tensors (labels, masks,
    ``uint8`` images) and tensors of other ranks are returned unchanged, strides included.

    Raises:
        TypeError: ``tensor`` is not a ``torch.Tensor``.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_channels_last expects a torch.Tensor, got {type(tensor).__name__}.")
    if tensor.dim() != 4 or not tensor.is_floating_point() or is_channels_last(tensor):
        return tensor
    return tensor.to(memory_format=torch.channels_last)


def to_nchw(tensor: Tensor) -> Tensor:
    """The inverse of :func:`to_channels_last`: a floating-point 4-D ``tensor`` with the strides of a contiguous
    NCHW tensor of its shape, else ``tensor`` itself.

    ``tensor.contiguous()`` is not enough for the ambiguous shapes (``C == 1`` or ``H == W == 1``, e.g. depthwise
    conv weights ``[C, 1, k, k]``): a channels_last tensor of such a shape counts as contiguous, so it is returned
    with its channels_last strides, from which PyTorch's operators keep propagating channels_last. Here such a
    tensor is copied (``clone(memory_format=torch.contiguous_format)``, differentiable); one that already has the
    contiguous strides is returned as is (no copy).

    Raises:
        TypeError: ``tensor`` is not a ``torch.Tensor``.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_nchw expects a torch.Tensor, got {type(tensor).__name__}.")
    if tensor.dim() != 4 or not tensor.is_floating_point():
        return tensor
    n, c, h, w = tensor.shape
    if tensor.numel() == 0 or tuple(tensor.stride()) == (c * h * w, h * w, w, 1):
        return tensor
    return tensor.clone(memory_format=torch.contiguous_format)


# --------------------------------------------------------------------------------------------------- batches


class _FrozenDataclassMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return dataclasses.is_dataclass(obj) and not isinstance(obj, type) and type(obj).__dataclass_params__.frozen  # type: ignore[attr-defined]  # set by @dataclass, not in typeshed


class _FrozenDataclass(metaclass=_FrozenDataclassMeta):
    """``isinstance(x, _FrozenDataclass)``: x is an instance of a frozen dataclass.

    ``map_tensors`` rebuilds dataclasses with ``setattr``, which frozen ones refuse (ValueError); they are
    rebuilt here with ``dataclasses.replace`` instead.
    """


class BatchToChannelsLast:
    """:func:`batch_to_channels_last` as a callable that counts what it did, summed over all its calls.

    ``ChannelsLast`` keeps one per fit and reports its counts. Stateless apart from the counters; not
    thread-safe.

    Attributes:
        batches: calls so far.
        converted: floating-point 4-D tensors copied to channels_last.
        already: floating-point 4-D tensors that were channels_last already (returned as they are).

    Example:
        ```pycon
        >>> convert = BatchToChannelsLast()
        >>> x, y = convert((torch.rand(8, 3, 32, 32), torch.arange(8)))
        >>> convert.batches, convert.converted, convert.already
        (1, 1, 0)
        >>> is_channels_last(x)
        True
        ```
    """

    def __init__(self) -> None:
        self.batches = 0
        self.converted = 0
        self.already = 0

    def _tensor(self, tensor: Tensor) -> Tensor:
        if tensor.dim() != 4 or not tensor.is_floating_point():
            return tensor
        if is_channels_last(tensor):
            self.already += 1
            return tensor
        self.converted += 1
        return tensor.to(memory_format=torch.channels_last)

    def _frozen_dataclass(self, obj: Any) -> Any:
        changes = {f.name: self._apply(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)

    def _dispatch(self, obj: Any) -> Any:
        if isinstance(obj, Tensor):
            return self._tensor(obj)
        return self._frozen_dataclass(obj)

    def _apply(self, batch: Any) -> Any:
        return map_tensors(batch, (Tensor, _FrozenDataclass), self._dispatch)

    def __call__(self, batch: Any) -> Any:
        """``batch`` converted as by :func:`batch_to_channels_last` (same arguments, result and errors)."""
        self.batches += 1
        return self._apply(batch)


def batch_to_channels_last(batch: Any) -> Any:
    """Every floating-point 4-D tensor in ``batch`` converted to ``torch.channels_last``; all else unchanged.

    Args:
        batch: a tensor or any nesting of tuples, lists, dicts (and other mappings), namedtuples and dataclasses
            (frozen ones included) holding tensors and other objects, as a ``DataLoader`` yields it. Images are
            expected as ``[N, C, H, W]`` floating-point tensors (any float dtype and device).

    Returns:
        A batch of the same structure: containers keep their type, keys and order (rebuilt by
        :func:`~lightning_efficient.functional.batch.map_tensors`, as Lightning's ``apply_to_collection``;
        dataclasses are copied, non-tensor fields deep-copied, frozen ones rebuilt with ``dataclasses.replace``).
        Each floating-point 4-D tensor has equal values, dtype, device and shape and :func:`is_channels_last` is
        true for it (those already channels_last are returned as they are). Integer/bool tensors (labels, masks,
        ``uint8`` images), tensors of other ranks and non-tensors are the same objects, strides untouched.

    Example:
        ```pycon
        >>> batch = (torch.rand(8, 3, 32, 32), torch.arange(8))
        >>> x, y = batch_to_channels_last(batch)
        >>> is_channels_last(x), y.stride()
        (True, (1,))
        ```
    """
    return BatchToChannelsLast()(batch)


# ---------------------------------------------------------------------------------------------------- models


@dataclasses.dataclass(frozen=True)
class ConversionReport:
    """What :func:`convert_module_to_channels_last` did, by qualified tensor name (``"backbone.0.weight"``).

    Attributes:
        converted: parameters and buffers whose layout was changed (4-D to channels_last; 5-D to
            channels_last_3d under ``five_d="channels_last_3d"``).
        already: 4-D (or converted-policy 5-D) floating-point tensors that were in the target layout already.
        skipped_5d: floating-point 5-D tensors left as they are under ``five_d="skip"``.
        excluded_modules: names of the excluded modules (roots of excluded subtrees; ``""`` is the root module),
            whose parameters and buffers were not touched.
        excluded_tensors: floating-point 4-D/5-D tensors inside excluded modules that were left as they are.
    """

    converted: tuple[str, ...] = ()
    already: tuple[str, ...] = ()
    skipped_5d: tuple[str, ...] = ()
    excluded_modules: tuple[str, ...] = ()
    excluded_tensors: tuple[str, ...] = ()

    @property
    def num_converted(self) -> int:
        """Number of parameters and buffers whose layout was changed."""
        return len(self.converted)

    def summary(self) -> str:
        """One line for logs and the efficiency report."""
        parts = [f"{len(self.converted)} tensors converted", f"{len(self.already)} already channels_last"]
        if self.skipped_5d:
            parts.append(f"{len(self.skipped_5d)} 5-D skipped")
        if self.excluded_modules:
            parts.append(f"excluded modules {list(self.excluded_modules)} ({len(self.excluded_tensors)} tensors left)")
        return ", ".join(parts)


def parse_exclude(exclude: ExcludeSpec | None) -> tuple[tuple[str, ...], tuple[type, ...]]:
    """Split an ``exclude`` argument into module names and ``nn.Module`` subclasses, checking their types.

    Names are checked against a model only by :func:`convert_module_to_channels_last`; this function needs no
    model, so a callback can reject bad arguments in its constructor.

    Args:
        exclude: ``None``, a name (``"head"``), an ``nn.Module`` subclass, or an iterable of them.

    Returns:
        ``(names, types)``, each a tuple in the order given.

    Raises:
        TypeError: ``exclude`` is not iterable, or an entry is neither a str nor an ``nn.Module`` subclass.
        ValueError: the empty name ``""`` (the whole model).

    Example:
        ```pycon
        >>> parse_exclude(("head", nn.Conv1d))
        (('head',), (<class 'torch.nn.modules.conv.Conv1d'>,))
        ```
    """
    if exclude is None:
        return (), ()
    items = [exclude] if isinstance(exclude, (str, type)) else exclude
    try:
        items = list(items)
    except TypeError:
        raise TypeError(
            "`exclude` must be a module name, an nn.Module subclass, or an iterable of them, e.g. "
            f"exclude=('head', nn.Conv1d); got {exclude!r}."
        ) from None
    names: list[str] = []
    types: list[type] = []
    for item in items:
        if isinstance(item, str):
            if not item:
                raise ValueError(
                    "`exclude` got the empty name '', which is the whole model; to leave the model as it is, "
                    "do not convert it (ChannelsLast(convert_model=False))."
                )
            names.append(item)
        elif isinstance(item, type) and issubclass(item, nn.Module):
            types.append(item)
        else:
            raise TypeError(
                "`exclude` entries must be module names (str, as in `model.named_modules()`) or nn.Module "
                f"subclasses; got {item!r} of type {type(item).__name__}."
            )
    return tuple(names), tuple(types)


def check_five_d(five_d: str) -> FiveDPolicy:
    """``five_d`` itself if it is one of :data:`FIVE_D_POLICIES`.

    Raises:
        ValueError: any other value (the message lists the accepted ones).
    """
    if five_d not in FIVE_D_POLICIES:
        raise ValueError(f"`five_d` must be one of {FIVE_D_POLICIES}, got {five_d!r}.")
    return five_d  # type: ignore[return-value]


def _convert_in_place(tensor: Tensor, memory_format: torch.memory_format) -> None:
    # Assigning `.data` keeps the tensor object (a Parameter stays the Parameter that optimizers and DDP hold).
    tensor.data = tensor.data.to(memory_format=memory_format)
    if isinstance(tensor, nn.Parameter) and tensor.grad is not None:
        tensor.grad = tensor.grad.to(memory_format=memory_format)


def convert_module_to_channels_last(
    module: nn.Module, exclude: ExcludeSpec | None = (), five_d: FiveDPolicy = "skip"
) -> ConversionReport:
    """Convert ``module``'s floating-point 4-D parameters and buffers to ``torch.channels_last``, in place.

    Unlike ``module.to(memory_format=torch.channels_last)`` this does not fail on 5-D tensors (``Conv3d``
    weights), keeps every ``nn.Parameter`` object (only ``param.data`` is replaced, so optimizers created before
    or after see the same parameters) and can exclude modules. The result survives ``module.to(device)`` and
    dtype casts (they preserve strides). Idempotent.

    Policy: every floating-point 4-D parameter and buffer of a non-excluded module (the weights of ``Conv2d``,
    ``ConvTranspose2d``, depthwise and grouped convolutions, and any custom 4-D parameter such as a
    ``[1, C, H, W]`` positional embedding) becomes channels_last (existing ``.grad`` too). 5-D tensors follow
    ``five_d``. All other tensors (``Linear``, norms, embeddings, ``Conv1d``, integer buffers such as
    ``num_batches_tracked``) are not touched: same objects, same strides. Parameter-free modules are fine;
    uninitialized lazy parameters (``nn.LazyConv2d`` before its first forward) are left alone, so call this after
    materializing them.
    A parameter shared by several modules is converted once, and not at all if one of them is excluded.

    Args:
        module: the model, before DDP/FSDP wrapping (converting after wrapping works too, but DDP's gradient
            buckets were then laid out for the old strides).
        exclude: modules to leave as they are: names as in ``module.named_modules()`` (``"head"``,
            ``"backbone.layer1.0"``) and/or ``nn.Module`` subclasses (matched with ``isinstance``); a single name
            or type is accepted too. Excluding a module excludes all its submodules.
        five_d: ``"skip"`` (default) leaves 5-D tensors (``Conv3d`` weights) as they are: the batch conversion
            only handles 4-D inputs, and PyTorch would otherwise copy every NCDHW input of such a layer to
            NDHWC; ``"channels_last_3d"`` converts them to ``torch.channels_last_3d`` for models fed NDHWC.

    Returns:
        A :class:`ConversionReport` naming what was converted, already converted, skipped and excluded.

    Raises:
        TypeError: ``module`` is not an ``nn.Module``, or an ``exclude`` entry is neither a str nor an
            ``nn.Module`` subclass.
        ValueError: an ``exclude`` name matches no submodule (the message lists the top-level names), the
            empty name is given, or ``five_d`` is not one of :data:`FIVE_D_POLICIES`.

    Example:
        ```pycon
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 1))
        >>> report = convert_module_to_channels_last(net, exclude="1")
        >>> report.converted, report.excluded_tensors
        (('0.weight',), ('1.weight',))
        >>> is_channels_last(net[0].weight)
        True
        ```
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"convert_module_to_channels_last expects an nn.Module, got {type(module).__name__}.")
    names, types = parse_exclude(exclude)
    five_d = check_five_d(five_d)

    all_modules = dict(module.named_modules(remove_duplicate=False))
    missing = [name for name in names if name not in all_modules]
    if missing:
        top = [name for name, _ in module.named_children()]
        raise ValueError(
            f"`exclude` names {missing} match no submodule of {type(module).__name__}; names are dotted paths "
            f"as in `model.named_modules()`, top-level ones here: {top}."
        )

    # Roots of the excluded subtrees, then every tensor below them.
    excluded_roots: list[str] = []
    excluded_ids: set[int] = set()
    for name, sub in all_modules.items():
        if name in names or isinstance(sub, types):
            if not any(name == root or name.startswith(root + ".") or root == "" for root in excluded_roots):
                excluded_roots.append(name)
    excluded_tensor_names: list[str] = []
    for root in excluded_roots:
        for sub_name, sub in all_modules[root].named_modules(prefix=root, remove_duplicate=False):
            for tname, tensor in [*sub.named_parameters(recurse=False), *sub.named_buffers(recurse=False)]:
                if tensor is None or id(tensor) in excluded_ids or is_lazy(tensor):
                    continue
                excluded_ids.add(id(tensor))
                if tensor.is_floating_point() and tensor.dim() in (4, 5):
                    excluded_tensor_names.append(f"{sub_name}.{tname}" if sub_name else tname)

    converted: list[str] = []
    already: list[str] = []
    skipped: list[str] = []
    seen: set[int] = set()
    tensors = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    for name, tensor in tensors:
        if tensor is None or id(tensor) in seen or id(tensor) in excluded_ids:
            continue
        seen.add(id(tensor))
        if is_lazy(tensor) or not tensor.is_floating_point():
            continue
        if tensor.dim() == 4:
            memory_format, done = torch.channels_last, is_channels_last(tensor)
        elif tensor.dim() == 5:
            if five_d == "skip":
                skipped.append(name)
                continue
            memory_format, done = torch.channels_last_3d, is_channels_last_3d(tensor)
        else:
            continue
        if done:
            already.append(name)
        else:
            _convert_in_place(tensor, memory_format)
            converted.append(name)
    return ConversionReport(
        converted=tuple(converted),
        already=tuple(already),
        skipped_5d=tuple(skipped),
        excluded_modules=tuple(excluded_roots),
        excluded_tensors=tuple(excluded_tensor_names),
    )


# ---------------------------------------------------------------------------------------------------- errors

# Messages of the errors that code written for NCHW-contiguous tensors raises on a channels_last one: PyTorch's
# `Tensor.view` (ATen `view_impl`), and the contiguity checks of custom kernels and other libraries.
_VIEW_ERROR = "view size is not compatible with input tensor's size and stride"
_CONTIGUITY_ERRORS = ("must be contiguous", "is not contiguous", "non-contiguous", "expected contiguous")

#: The start of the note that :func:`layout_error_note` returns (and :class:`ChannelsLast` adds to such errors).
LAYOUT_NOTE_PREFIX = "lightning_efficient.ChannelsLast:"


def layout_error_note(exception: BaseException) -> str | None:
    """A note naming ``ChannelsLast`` and the fixes, for an error that NCHW-only code raises on a channels_last
    tensor; ``None`` for any other error.

    Under channels_last the activations are channels_last too (a convolution whose input or weight is
    channels_last returns channels_last), so code written for contiguous NCHW tensors can fail on them:

    * ``h.view(h.size(0), -1)`` merges the channel dimension with the spatial ones, which are not adjacent in NHWC
      memory: ``RuntimeError: view size is not compatible with input tensor's size and stride``. The fix is
      ``torch.flatten(h, 1)``, ``h.reshape(h.size(0), -1)`` or ``nn.Flatten()``: they return the same values in
      the same (NCHW) order, copying only when needed, so a following ``nn.Linear`` sees exactly what it saw
      without channels_last.
    * custom kernels and libraries that check ``is_contiguous()`` (``"input must be contiguous"``, ``"... is not
      contiguous"``, ``"non-contiguous"``): call ``.contiguous()`` on the tensor passed to them.

    Only the message is inspected (the type is whatever the failing code raised), so the note says what the
    likely cause is and how to check it, not that ChannelsLast certainly caused it.

    Args:
        exception: any exception.

    Returns:
        The note (one paragraph starting with :data:`LAYOUT_NOTE_PREFIX`), or ``None``.

    Example:
        ```pycon
        >>> h = torch.zeros(2, 8, 4, 4).to(memory_format=torch.channels_last)
        >>> try:
        ...     h.view(2, -1)
        ... except RuntimeError as err:
        ...     print(layout_error_note(err).split(":")[0])
        lightning_efficient.ChannelsLast
        ```
    """
    message = str(exception)
    if _VIEW_ERROR in message:
        return (
            f"{LAYOUT_NOTE_PREFIX} this is likely a `.view(...)` on an activation in channels_last (NHWC) memory: "
            "ChannelsLast converts the batches and conv weights, so conv outputs are channels_last, and `.view` "
            "cannot merge the channel and spatial dimensions of such a tensor (e.g. `h.view(h.size(0), -1)` before "
            "a Linear layer). Fix: use `torch.flatten(h, 1)` or `h.reshape(h.size(0), -1)` (or `nn.Flatten()`), "
            "which give the same values in the same order and copy only when needed; or train without "
            "ChannelsLast."
        )
    lowered = message.lower()
    if any(pattern in lowered for pattern in _CONTIGUITY_ERRORS):
        return (
            f"{LAYOUT_NOTE_PREFIX} this error asks for a contiguous tensor; under ChannelsLast the batches and conv "
            "outputs are channels_last (NHWC) and not contiguous in the NCHW sense. Fix: call `.contiguous()` on "
            "the tensor passed to the code that raised (a custom kernel or library expecting NCHW), exclude the "
            "module with ChannelsLast(exclude=...) if it holds the 4-D weights involved, or train without "
            "ChannelsLast."
        )
    return None
