"""``GPUDecode``: decode ``FastImageFolder(backend="nvjpeg")`` batches on the device (nvJPEG on CUDA)."""

from __future__ import annotations

from typing import Any, Optional, Union

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_warn

from lightning_efficient.adapter import Callback
from lightning_efficient.data.device_decode import EncodedImages, decode_batch
from lightning_efficient.functional.batch import get_entry, replace_entry
from lightning_efficient.pipeline import BatchPipeline, add_stage

__all__ = ["GPUDecode"]

_STAGE_NAME = "gpu_decode"
_INTERPOLATIONS = ("bilinear", "bicubic", "nearest")


class GPUDecode(Callback):
    """Decode batches of encoded JPEGs on the training device, after the batch transfer and before anything else.

    With ``FastImageFolder(..., backend="nvjpeg")`` and ``uint8_collate``, DataLoader workers only read files and
    choose each crop from the header; a batch reaches the LightningModule's ``on_after_batch_transfer`` as
    ``(EncodedImages, targets)``. This callback replaces the :class:`~lightning_efficient.data.EncodedImages` by
    ``uint8 [B, 3, H, W]`` on ``pl_module.device`` using :func:`~lightning_efficient.data.decode_batch`: one
    batched ``torchvision.io.decode_jpeg(..., device="cuda")`` call (nvJPEG), then crop, antialiased resize and
    EXIF orientation on the device; PNGs, GIFs and JPEGs nvJPEG rejects are decoded by Pillow on the CPU. It is
    the ``"decode"`` stage ``"gpu_decode"`` of the :class:`~lightning_efficient.pipeline.BatchPipeline`: it runs
    **before** the user's own ``on_after_batch_transfer`` (which therefore sees ``uint8 [B, 3, H, W]`` device
    tensors, as with ``backend="pil"``) and before :class:`GPUAugmentation` and :class:`ChannelsLast`, whatever
    the order of the callbacks list. Batches without encoded images at ``image_key`` (e.g. a validation loader
    with ``backend="pil"``) pass through unchanged.

    Use it where the CPU cannot keep up with the GPU (few cores per GPU, large JPEGs). On a machine without CUDA
    it still works but decodes in the main process on the CPU, which is slower than decoding in DataLoader
    workers (``backend="pil"``); it warns once.

    Args:
        interpolation: ``"bilinear"`` (default), ``"bicubic"`` or ``"nearest"`` (antialiased where applicable).
        image_key: where the images are in the batch: an index into a tuple/list batch (default 0) or a dict key.

    Raises:
        ValueError: unknown ``interpolation``.
        ImageDecodeError: (during training) a file no decoder can read; the message names the file.

    Example:
        ```python
        train = FastImageFolder(
            "imagenet/train", size=176, train=True, backend="nvjpeg"
        )
        loader = DataLoader(
            train, batch_size=256, shuffle=True,
            collate_fn=uint8_collate, num_workers=8,
        )
        augment = GPUAugmentation(mean=IMAGENET_MEAN, std=IMAGENET_STD)
        trainer = pl.Trainer(
            precision="bf16-mixed",
            callbacks=[GPUDecode(), augment, ChannelsLast()],
        )
        ```

    Source: torchvision ``io.decode_jpeg`` (batched nvJPEG decoding on CUDA); NVIDIA DALI's idea of decoding on the
    GPU when the CPU is the bottleneck.
    """

    def __init__(self, interpolation: str = "bilinear", image_key: Union[int, str] = 0) -> None:
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(f"GPUDecode: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}.")
        self.interpolation = interpolation
        self.image_key = image_key
        self._pipeline: Optional[BatchPipeline] = None
        self._module: Any = None
        self._warned_cpu = False
        #: batches decoded so far (in this process)
        self.batches_decoded = 0
        #: paths of the images decoded by Pillow on the CPU instead (not JPEG, or rejected by the device decoder)
        self.cpu_fallbacks: list[str] = []

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        self._module = pl_module
        self._pipeline = add_stage(trainer, pl_module, _STAGE_NAME, self._transform, "decode")

    def efficiency_facts(self) -> dict[str, Any]:
        """For :class:`~lightning_efficient.EfficiencyReport`: JPEGs are decoded on the device, not by the
        DataLoader workers (so Pillow-SIMD advice does not apply)."""
        return {"decodes_images": False}

    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if self._pipeline is not None:
            self._pipeline.remove(_STAGE_NAME)
        self._pipeline = None
        self._module = None

    def _transform(self, batch: Any, dataloader_idx: int) -> Any:
        try:
            images = get_entry(batch, self.image_key, who="GPUDecode")
        except ValueError:
            return batch  # nothing at `image_key`: not a batch of this dataset, pass it through
        if not isinstance(images, EncodedImages):
            return batch
        return replace_entry(batch, self.image_key, self._decode(images))

    def _decode(self, encoded: EncodedImages):
        device = self._module.device
        if device.type != "cuda" and not self._warned_cpu:
            self._warned_cpu = True
            rank_zero_warn(
                f"GPUDecode: the model is on {device}, so JPEGs are decoded on the CPU in the main process, one batch "
                "at a time; that is slower than FastImageFolder(backend='pil') decoding in DataLoader workers. "
                "Use GPUDecode with a CUDA device."
            )
        self.batches_decoded += 1
        return decode_batch(encoded, device, self.interpolation, cpu_fallbacks=self.cpu_fallbacks)
