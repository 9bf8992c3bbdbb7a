"""``FastImageFolder``: an ImageFolder that yields fixed-size ``uint8`` tensors, and ``uint8_collate``.

The CPU does only what it must: read the header, choose the crop, decode the JPEG at the smallest DCT scale that
covers the crop (``Image.draft``), and crop+resize in one antialiased
resample (torch's ``uint8`` kernels, or Pillow's resize where Pillow-SIMD is installed); how a file becomes a
sample is one strategy object per ``backend`` (:mod:`~lightning_efficient.data.backends`). Float conversion,
normalisation and augmentation are left to the accelerator (e.g.
:class:`~lightning_efficient.callbacks.GPUAugmentation`), so a batch crosses the host-device link as ``uint8`` (a
quarter of the bytes of float32). Measured throughput: ``benchmarks/results/decoding.md``,
and ``benchmarks/results/decoding-pillow-simd.md``.
"""

from __future__ import annotations

import dataclasses
import struct
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch.utils.data import default_collate
from torchvision.datasets import DatasetFolder, ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader

from lightning_efficient.data.backends import make_backend
from lightning_efficient.data.crop_choice import CropChoice
from lightning_efficient.data.decode import ImageDecodeError, pil_flavour, resolve_resize
from lightning_efficient.data.device_decode import EncodedImage, EncodedImages

__all__ = ["SPLIT_NAMES", "FastImageFolder", "ImageDecodeError", "pil_flavour", "uint8_collate"]

_ON_ERROR = ("raise", "skip")
#: Folder names of dataset splits (compared case-insensitively): when every class folder of a root has such a
#: name, the root is most likely one level too high (``imagenette/`` instead of ``imagenette/train``).
SPLIT_NAMES: frozenset[str] = frozenset(
    {
        "train",
        "training",
        "trn",
        "trainval",
        "train_val",
        "val",
        "valid",
        "validation",
        "dev",
        "holdout",
        "test",
        "testing",
        "tst",
        "eval",
        "evaluation",
    }
)
# What Pillow / torchvision raise for unreadable files (UnidentifiedImageError and "image file is truncated" are
# OSErrors; corrupt headers surface as SyntaxError, struct.error, EOFError or ValueError; torchvision raises
# RuntimeError). DecompressionBombError protects against absurd sizes.
_DECODE_ERRORS = (
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    RuntimeError,
    struct.error,
    Image.DecompressionBombError,
)


def _check_size(size: Any) -> tuple[int, int]:
    if isinstance(size, bool):
        raise TypeError(f"size must be a positive int or a (height, width) pair of positive ints, got {size!r}.")
    if isinstance(size, int):
        size = (size, size)
    if (
        not isinstance(size, Sequence)
        or len(size) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in size)
    ):
        raise TypeError(
            f"size must be a positive int or a (height, width) pair of positive ints, got {size!r}. "
            "Example: size=224 or size=(224, 192)."
        )
    if min(size) <= 0:
        raise ValueError(f"size must be positive, got {tuple(size)}. Example: size=224.")
    return int(size[0]), int(size[1])


def _check_range(name: str, value: Any, upper: float | None) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a (min, max) pair of numbers, got {value!r}.") from None
    if not (0.0 < lo <= hi) or (upper is not None and hi > upper):
        bound = f" <= {upper}" if upper is not None else ""
        raise ValueError(
            f"{name} must satisfy 0 < min <= max{bound}, got {value!r}. "
            f"torchvision's defaults are scale=(0.08, 1.0), ratio=(3/4, 4/3)."
        )
    return lo, hi


def _warn_if_split_folders(root: Path, classes: Sequence[str]) -> None:
    """Warn when every class folder is named like a dataset split (``root`` is one level too high)."""
    if not classes or not all(name.strip().lower() in SPLIT_NAMES for name in classes):
        return
    split = next((name for name in classes if name.strip().lower() in ("train", "training")), classes[0])
    warnings.warn(
        f"FastImageFolder({str(root)!r}): the class folders {list(classes)} are named like dataset splits, so "
        f"this dataset has {len(classes)} classes, one per split. Point root at one split, e.g. "
        f"FastImageFolder({str(root / split)!r}) (and the validation split for validation); if these really are "
        "the class names, filter this warning.",
        UserWarning,
        stacklevel=3,
    )


class FastImageFolder(ImageFolder):
    """Drop-in ``torchvision.datasets.ImageFolder`` that yields ``(uint8 tensor [3, H, W], target)``.

    Same ``classes``, ``class_to_idx``, ``samples``, ``targets``, ``imgs`` and order as ``ImageFolder`` on the same
    root (it is a subclass and uses the same folder scan and default extensions). Each item is decoded, cropped and
    resized on the CPU to a fixed size, with no float conversion:

    * ``train=True``: a RandomResizedCrop (torchvision semantics: area fraction ``scale``, aspect ``ratio``, 10
      tries then central fallback) drawn from torch's global RNG using only the header size, then the JPEG is
      decoded at 1/2, 1/4 or 1/8 scale when that still covers the crop at the output size (libjpeg DCT scaling via
      Pillow's ``Image.draft``), and cropped+resized in a single antialiased resample (see ``resize``).
    * ``train=False``: resize the shorter side to ``eval_resize`` and centre-crop ``size`` (torchvision's
      ``Resize`` + ``CenterCrop`` geometry), done with the same draft + single-resample trick.

    Grayscale, CMYK, palette, RGBA/LA, PNG and GIF images are returned as RGB (alpha dropped, as
    ``ImageFolder``'s loader does); EXIF orientation is honoured (the crop is chosen in the viewer's coordinates).
    Every backend honours Pillow's decompression-bomb limit ``PIL.Image.MAX_IMAGE_PIXELS``, checked from the
    header before decoding: above it a ``PIL.Image.DecompressionBombWarning``, above twice it an
    :class:`ImageDecodeError` naming the file; ``None`` turns it off (see
    :mod:`~lightning_efficient.data.decode.limits`; set it where the decoding runs, e.g. in the DataLoader workers).
    The random crop uses ``torch`` RNG, so ``torch.manual_seed`` / Lightning's ``seed_everything(workers=True)``
    plus DataLoader worker seeding make it reproducible.

    Args:
        root: dataset root laid out as ``root/<class>/<image>``.
        size: output size in pixels, an int (square) or ``(height, width)``.
        train: random resized crop (True) or shorter-side resize + centre crop (False).
        scale: RandomResizedCrop area fraction range, ``0 < min <= max <= 1``.
        ratio: RandomResizedCrop aspect-ratio (w / h) range, ``0 < min <= max``.
        eval_resize: shorter side in pixels before the centre crop (``train=False``); default
            ``round(max(size) * 256 / 224)`` (256 for 224). Must be >= ``max(size)``.
        interpolation: ``"bilinear"`` (default, as torchvision's RandomResizedCrop/Resize), ``"bicubic"``,
            ``"nearest"``, ``"lanczos"``, ``"box"``, ``"hamming"`` (the last three: ``backend="pil"`` only).
        backend: ``"pil"`` (default; Pillow, or Pillow-SIMD when that is the installed PIL, see
            :func:`pil_flavour`) or ``"torchvision"`` (``torchvision.io.decode_image`` on CPU, then
            ``transforms.v2.functional`` resize on ``uint8`` with ``antialias=True``; no DCT scaling, so slower
            for large JPEGs, but bit-compatible with a torchvision tensor pipeline), or ``"nvjpeg"``: items are
            :class:`~lightning_efficient.data.EncodedImage` (the file's bytes and the crop chosen from its header,
            no pixels decoded on the CPU); ``uint8_collate`` batches them and the
            :class:`~lightning_efficient.callbacks.GPUDecode` callback decodes each batch on the device with one
            batched ``torchvision.io.decode_jpeg`` call (nvJPEG on CUDA), then crops and resizes there. With
            ``"nvjpeg"``, ``on_error="skip"`` covers files whose header cannot be read and truncated JPEGs; a file
            whose pixels still cannot be decoded raises :class:`ImageDecodeError` from ``GPUDecode`` (naming it).
        resize: engine of the crop+resize after a Pillow decode (``backend="pil"``): ``"torch"`` (torch's
            antialiased ``uint8`` kernels on the NHWC view; box rounded to whole decoded pixels), ``"pil"``
            (``Image.resize`` with the exact fractional box; Pillow-SIMD's SIMD resize when installed), or
            ``"auto"`` (default): ``"pil"`` when Pillow-SIMD is the installed PIL or the interpolation is not
            bilinear/bicubic, else ``"torch"`` (the faster engine in each case; figures in
            ``benchmarks/results/decoding.md`` and ``benchmarks/results/decoding-pillow-simd.md``). The chosen
            engine is :attr:`resize_engine`.
        draft: allow JPEG DCT-scaled decoding (``backend="pil"``). Turning it off decodes at full size.
        draft_gap: the DCT-scaled crop must cover ``draft_gap`` times the output size (Pillow's ``reducing_gap``
            idea, see :func:`~lightning_efficient.data.decode.jpeg_draft_scale`). Default ``None``: 1.0 for
            ``train=True`` (smallest decode; a small deviation from a full decode, irrelevant under random-crop
            augmentation) and 2.0 for ``train=False`` (near-identical to torchvision's ``Resize`` + ``CenterCrop``,
            so validation accuracy stays comparable); the bounds are asserted in
            ``tests/data/test_fast_image_folder.py``.
        on_error: ``"raise"`` (default): an unreadable file raises :class:`ImageDecodeError` naming the file.
            ``"skip"``: the item is replaced by the next decodable item (index + 1, + 2, ... wrapping around), a
            single ``UserWarning`` is issued per dataset copy (each DataLoader worker holds its own copy), and the
            bad paths are recorded in :attr:`skipped_files` / :attr:`num_skipped` (per process: counts made inside
            workers stay in the workers). The epoch length is unchanged; the replaced item's class is not kept.
        transform: optional callable applied to the ``uint8 [3, H, W]`` tensor (not to a PIL image).
        target_transform: optional callable applied to the target, as in ``ImageFolder``.
        extensions: file suffixes to include (default: torchvision's ``IMG_EXTENSIONS``, which has no ``.gif``;
            pass e.g. ``IMG_EXTENSIONS + (".gif",)`` to include GIFs). Mutually exclusive with ``is_valid_file``.
        is_valid_file: ``path -> bool`` filter, as in ``ImageFolder``.
        allow_empty: allow class folders without valid files, as in ``ImageFolder``. An entirely empty split is
            still an error.

    Warns:
        UserWarning: every class folder has the name of a dataset split (:data:`SPLIT_NAMES`: ``train``, ``val``,
            ``test``, ...): ``root`` is most likely the dataset folder instead of one split of it (e.g.
            ``data/imagenette`` gives the two "classes" ``train`` and ``val``); point ``root`` at
            ``data/imagenette/train``. Filter the warning if the class names are meant.

    Raises:
        FileNotFoundError: ``root`` missing or not a directory, no class folders under it, a class folder without
            valid files (unless ``allow_empty``), or no image at all.
        TypeError / ValueError: invalid ``size``, ``scale``, ``ratio``, ``eval_resize``, ``interpolation``,
            ``backend``, ``resize`` (``"torch"`` with a Pillow-only interpolation), ``on_error``, a ``transform``
            with ``backend="nvjpeg"``, or both ``extensions`` and ``is_valid_file``.
        ImageDecodeError: (from ``__getitem__``, an ``OSError``) a file cannot be decoded and ``on_error="raise"``.

    Example:
        ```python
        train = FastImageFolder("imagenet/train", size=176, train=True)
        val = FastImageFolder("imagenet/val", size=224, train=False)
        loader = DataLoader(
            train, batch_size=256, shuffle=True, collate_fn=uint8_collate,
            **suggest_loader_kwargs().kwargs,
        )
        images, targets = next(iter(loader))
        # images: uint8 [256, 3, 176, 176]; targets: int64 [256]
        ```

    Sources: torchvision ``RandomResizedCrop``/``Resize``/``CenterCrop``; libjpeg DCT scaling and Pillow's
    ``Image.draft`` documentation; MosaicML Composer's note on Pillow-SIMD for CPU-bound loading.
    """

    def __init__(
        self,
        root: str | Path,
        size: int | tuple[int, int] = 224,
        *,
        train: bool = True,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        eval_resize: int | None = None,
        interpolation: str = "bilinear",
        backend: str = "pil",
        resize: str = "auto",
        draft: bool = True,
        draft_gap: float | None = None,
        on_error: str = "raise",
        transform: Callable[[torch.Tensor], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        extensions: tuple[str, ...] | None = None,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
    ) -> None:
        self.size = _check_size(size)
        self.train = bool(train)
        self.scale = _check_range("scale", scale, 1.0)
        self.ratio = _check_range("ratio", ratio, None)
        if eval_resize is None:
            eval_resize = int(round(max(self.size) * 256 / 224))
        if isinstance(eval_resize, bool) or not isinstance(eval_resize, int) or eval_resize < max(self.size):
            raise ValueError(
                f"eval_resize must be an int >= max(size)={max(self.size)} (the shorter side before the centre crop), "
                f"got {eval_resize!r}. Leave it as None for the standard size * 256 / 224."
            )
        self.eval_resize = eval_resize
        #: The crop settings, applied to each image's header size
        #: (:class:`~lightning_efficient.data.crop_choice.CropChoice`).
        self.crop = CropChoice(self.size, self.train, self.scale, self.ratio, self.eval_resize)
        #: ``(h, w)`` to decode training items at instead of ``size`` (``(0, 0)``: ``size``), written by
        #: :class:`~lightning_efficient.ProgressiveResize`: int64 in shared memory, so that DataLoader workers see it.
        self.scheduled_size = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._crops: dict[tuple[int, int], CropChoice] = {}
        if draft_gap is None:
            draft_gap = 1.0 if self.train else 2.0
        if isinstance(draft_gap, bool) or not isinstance(draft_gap, (int, float)) or not draft_gap >= 1.0:
            raise ValueError(f"draft_gap must be a number >= 1 (or None for the default), got {draft_gap!r}.")
        #: The strategy that turns a file into a sample (:mod:`~lightning_efficient.data.backends`).
        self.decoder = make_backend(
            backend,
            interpolation=interpolation,
            resize=resize,
            draft=draft,
            draft_gap=draft_gap,
        )
        self.backend = backend
        if backend == "nvjpeg" and transform is not None:
            raise ValueError(
                "backend='nvjpeg' yields undecoded files (decoded later, on the device, by GPUDecode), so a CPU "
                "`transform` has nothing to work on; drop it and transform the decoded batch on the device "
                "(e.g. GPUAugmentation), or use backend='pil'."
            )
        self.interpolation = interpolation
        self.resize = resize
        #: ``"torch"`` or ``"pil"``: the resize engine ``resize`` resolved to (``backend="pil"``).
        self.resize_engine = resolve_resize(resize, interpolation)
        self.draft = bool(draft)
        self.draft_gap = float(draft_gap)
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, got {on_error!r}.")
        self.on_error = on_error
        if extensions is not None and is_valid_file is not None:
            raise ValueError("Pass either extensions or is_valid_file, not both (as torchvision's DatasetFolder).")
        if extensions is None and is_valid_file is None:
            extensions = IMG_EXTENSIONS

        root_path = Path(root).expanduser()
        if not root_path.is_dir():
            what = "is not a directory" if root_path.exists() else "does not exist"
            raise FileNotFoundError(
                f"FastImageFolder root {str(root_path)!r} {what}. Pass the folder that contains one sub-folder per "
                "class (root/<class>/<image>.jpg), e.g. '.../imagenet/train'."
            )
        try:
            DatasetFolder.__init__(
                self,
                root,  # as given (str or Path), exactly like ImageFolder
                default_loader,  # kept so ``self.loader(path)`` still returns a PIL image, as in ImageFolder
                extensions,
                transform=transform,
                target_transform=target_transform,
                is_valid_file=is_valid_file,
                allow_empty=allow_empty,
            )
        except FileNotFoundError as err:
            if "class folder" in str(err):
                raise  # already rewritten by find_classes below
            accepted = f"one of the extensions {extensions}" if extensions is not None else "that is_valid_file accepts"
            raise FileNotFoundError(
                f"{root_path}: {str(err).strip()} Put at least one image {accepted} in every class folder, remove the "
                "empty class folders, pass allow_empty=True, or widen extensions=/is_valid_file=."
            ) from err
        self.imgs = self.samples
        if not self.samples:
            raise FileNotFoundError(
                f"{root_path}: no image files found in any class folder (extensions {extensions}). Check the path "
                "(is it the split folder, e.g. '.../train'?) or pass extensions=/is_valid_file= for other suffixes."
            )
        _warn_if_split_folders(root_path, self.classes)
        self.skipped_files: list[str] = []
        self._warned = False

    def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
        """As ``ImageFolder.find_classes`` (sorted sub-folder names), with an error that names the path and fix.

        Args:
            directory: the folder holding one sub-folder per class.
        """
        try:
            return super().find_classes(directory)
        except FileNotFoundError as err:
            raise FileNotFoundError(
                f"{directory}: no class folders found (FastImageFolder, like torchvision's ImageFolder, expects "
                "root/<class>/<image>). Point root at the folder that contains the class sub-folders, or move the "
                "images into one sub-folder per class."
            ) from err

    @property
    def num_skipped(self) -> int:
        """Number of unreadable items replaced so far in this process (``on_error="skip"``)."""
        return len(self.skipped_files)

    def load_image(self, path: str, crop: CropChoice | None = None) -> torch.Tensor:
        """Decode, crop and resize one file to ``uint8 [3, H, W]`` (``crop``: default :attr:`crop`, at ``size``); no
        ``transform``, no skipping.

        Args:
            path: the image file.
            crop: how to crop it; ``None``: the dataset's :attr:`crop`.

        Raises:
            ImageDecodeError: the file cannot be read or decoded; the message names the file and the fix.
        """
        try:
            return self.decoder.load(path, crop or self.crop)  # type: ignore[return-value]
        except _DECODE_ERRORS as err:
            limit = (
                " If the file is trusted, raise Pillow's decompression-bomb limit instead "
                "(PIL.Image.MAX_IMAGE_PIXELS = <pixels>, or None; where the decoding runs, e.g. in worker_init_fn)."
                if isinstance(err, Image.DecompressionBombError)
                else ""
            )
            raise ImageDecodeError(
                f"{path}: cannot decode image ({type(err).__name__}: {err}); delete or replace the file, or pass "
                f"on_error='skip' to FastImageFolder to replace unreadable files by the next readable one.{limit}"
            ) from err

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """Return ``(image, target)``: ``image`` is ``uint8 [3, H, W]`` at ``size`` (training items: at
        :attr:`scheduled_size` while a ProgressiveResize sets one), after ``transform`` if given; ``target`` the class
        index (after ``target_transform`` if given).

        Raises:
            ImageDecodeError: unreadable file with ``on_error="raise"``, or no readable file at all with ``"skip"``.
        """
        return self._item(index, self._crop_now())

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, Any]]:
        """The items of one batch (a DataLoader asks for them together), as :meth:`__getitem__`'s, all at one size:
        :attr:`scheduled_size` is read once per batch, so that a change during the batch cannot mix sizes."""
        crop = self._crop_now()
        return [self._item(i, crop) for i in indices]

    def _crop_now(self) -> CropChoice:
        h, w = self.scheduled_size.tolist() if self.train else (0, 0)
        if h <= 0 or w <= 0 or (h, w) == self.size:
            return self.crop
        if (h, w) not in self._crops:
            self._crops[(h, w)] = dataclasses.replace(self.crop, size=(h, w))
        return self._crops[(h, w)]

    def _item(self, index: int, crop: CropChoice) -> tuple[Any, Any]:
        n = len(self.samples)
        attempts = 1 if self.on_error == "raise" else n
        for k in range(attempts):
            path, target = self.samples[(index + k) % n]
            try:
                image = self.load_image(path, crop)
            except ImageDecodeError as err:
                if self.on_error == "raise":
                    raise
                self._record_skip(path, err)
                continue
            if self.transform is not None:
                image = self.transform(image)
            if self.target_transform is not None:
                target = self.target_transform(target)
            return image, target
        raise ImageDecodeError(f"{self.root}: none of the {n} files could be decoded (on_error='skip').")

    def _record_skip(self, path: str, err: Exception) -> None:
        if path not in self.skipped_files:
            self.skipped_files.append(path)
        if not self._warned:
            self._warned = True
            cause = err.__cause__ if err.__cause__ is not None else err
            warnings.warn(
                f"FastImageFolder skipped an unreadable file and returned the next readable item instead: {path} "
                f"({type(cause).__name__}: {cause}). "
                "Further unreadable files are not warned about; see dataset.num_skipped / dataset.skipped_files "
                "(counted per process; DataLoader workers keep their own counts).",
                UserWarning,
                stacklevel=3,
            )

    def extra_repr(self) -> str:
        mode = (
            f"train: RandomResizedCrop(scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)})"
            if self.train
            else f"eval: Resize({self.eval_resize}) + CenterCrop"
        )
        engines = self.decoder.describe()
        return "\n".join(
            [
                f"Output: uint8 [3, {self.size[0]}, {self.size[1]}]",
                mode,
                f"Backend: {self.backend} ({engines}), interpolation={self.interpolation}, draft={self.draft} "
                f"(gap {self.draft_gap}), on_error={self.on_error}",
            ]
        )


def uint8_collate(batch: Sequence[tuple[torch.Tensor | EncodedImage, Any]], *, channels_last: bool = False):
    """Collate ``(uint8 [3, H, W], target)`` pairs into ``(uint8 [B, 3, H, W], int64 [B])``.

    Args:
        batch: list of ``(image, target)`` pairs as yielded by :class:`FastImageFolder`. Every image must be a
            ``torch.uint8`` tensor ``[C, H, W]`` of the same shape.
        channels_last: return the image batch with ``torch.channels_last`` strides (shape still ``[B, 3, H, W]``,
            memory laid out ``[B, H, W, 3]``; built by stacking HWC views, the same single copy as the default).
            Default ``False``: a contiguous NCHW batch, which nothing downstream can misread. Use
            ``functools.partial(uint8_collate, channels_last=True)`` as ``collate_fn`` to enable (picklable).

    Returns:
        ``(images, targets)``: ``images`` ``uint8 [B, C, H, W]`` (for ``FastImageFolder(backend="nvjpeg")`` items:
        an :class:`~lightning_efficient.data.EncodedImages` batch, decoded later by ``GPUDecode``); ``targets``
        ``int64 [B]`` when every target is an int (or 0-d integer tensor), otherwise
        ``torch.utils.data.default_collate`` of the targets. Inside a DataLoader worker the image batch is allocated
        in shared memory (via ``default_collate``), as usual.

    Raises:
        ValueError: empty batch, an item that is not an ``(image, target)`` pair, or images of different shapes
            (use a fixed ``size`` in the dataset).
        TypeError: an image that is not a ``torch.uint8`` tensor (do float conversion on the device, after the
            batch is transferred).
    """
    if len(batch) == 0:
        raise ValueError("uint8_collate got an empty batch.")
    heads = [item[0] for item in batch if isinstance(item, (tuple, list)) and len(item) == 2]
    encoded = [head for head in heads if isinstance(head, EncodedImage)]
    if len(encoded) == len(batch):
        # FastImageFolder(backend="nvjpeg"): keep the files encoded; GPUDecode decodes them on the device
        return EncodedImages(encoded), _collate_targets([item[1] for item in batch])
    images: list[torch.Tensor] = []
    targets: list[Any] = []
    for k, item in enumerate(batch):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(
                f"uint8_collate expects (image, target) pairs; item {k} is {type(item).__name__}"
                f"{' of length ' + str(len(item)) if isinstance(item, (tuple, list)) else ''}."
            )
        image, target = item
        if not isinstance(image, torch.Tensor) or image.dtype != torch.uint8:
            what = f"a {image.dtype} tensor" if isinstance(image, torch.Tensor) else type(image).__name__
            raise TypeError(
                f"uint8_collate: image {k} is {what}, expected a torch.uint8 tensor [C, H, W]. Remove float "
                "conversion/Normalize from the CPU transform (do it on the device) or use default_collate."
            )
        if image.ndim != 3:
            raise ValueError(f"uint8_collate: image {k} has shape {tuple(image.shape)}, expected [C, H, W].")
        if images and image.shape != images[0].shape:
            raise ValueError(
                f"uint8_collate: images differ in size: item 0 is {tuple(images[0].shape)}, item {k} is "
                f"{tuple(image.shape)}. Give the dataset a fixed output size (FastImageFolder(size=...))."
            )
        images.append(image)
        targets.append(target)

    if channels_last:
        stacked = default_collate([im.permute(1, 2, 0) for im in images]).permute(0, 3, 1, 2)
    else:
        stacked = default_collate(images)

    return stacked, _collate_targets(targets)


def _collate_targets(targets: list[Any]) -> Any:
    if all(isinstance(t, int) and not isinstance(t, bool) for t in targets) or all(
        isinstance(t, torch.Tensor) and t.ndim == 0 and not t.is_floating_point() for t in targets
    ):
        return torch.tensor([int(t) for t in targets], dtype=torch.int64)
    return default_collate(targets)
