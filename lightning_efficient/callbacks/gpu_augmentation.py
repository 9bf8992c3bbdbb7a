"""``GPUAugmentation``: per-sample augmentation of training batches after they reach the device."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from lightning_efficient.adapter import Callback
from lightning_efficient.functional.augment import (
    build_augmentation,
    check_normalization_stats,
    normalize,
    preview,
    to_float,
    unit_range_problem,
)
from lightning_efficient.functional.batch import get_entry, replace_entry
from lightning_efficient.pipeline import add_stage
from lightning_efficient.precision import precision_input_dtype

__all__ = ["GPUAugmentation", "IMAGENET_MEAN", "IMAGENET_STD"]

#: ImageNet channel statistics in ``[0, 1]`` units (torchvision's reference training scripts).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_NAME = "gpu_augmentation"
_SEED_MIX = 0x9E3779B97F4A7C15


class GPUAugmentation(Callback):
    r"""Convert, augment and normalise image batches on the device, per sample, inside ``on_after_batch_transfer``.

    What happens to each batch (after the user's own ``on_after_batch_transfer``; see
    :mod:`lightning_efficient.pipeline`), under ``torch.no_grad()`` and outside autocast:

    1. **every stage** (train, validation, test, predict, sanity check): the image tensor ``[B, C, H, W]`` is
       converted to float32 in ``[0, 1]`` (``uint8`` is divided by 255; float input is taken as already in
       ``[0, 1]``: the first batch after ``setup`` is checked, see *Warns*);
    2. **training batches only** (``trainer.training and not trainer.sanity_checking``): the augmentation runs,
       with random parameters drawn per image;
    3. **every stage**: optional normalisation ``(x - mean) / std`` and a cast to the dtype the Trainer's precision
       plugin gives model inputs (:func:`precision_input_dtype`: ``bfloat16`` for ``"bf16-true"``, ``float16`` for
       ``"16-true"``, ``float64`` for ``"64-true"``, float32 for ``"32-true"``; ``*-mixed`` precisions keep
       float32 and autocast does the rest; a plugin whose dtype cannot be told gives a warning and float32).

    Steps 1 and 3 run for validation/test/predict too, so a model trained on normalised floats is never fed raw
    ``uint8`` at evaluation. Do not normalise in the dataset as well.

    Augmentation runs in float32 whatever the precision (the cast of step 3 comes last), so the same draws give
    the same geometry and values under every ``precision=``, and masks stay aligned with their images.

    Built-in presets (``lightning_efficient.functional.augment``) draw parameters per sample and apply all
    geometric operations of a batch in one Kornia ``warp_affine``:

    - ``"trivial_augment"``: TrivialAugmentWide (Müller & Hutter 2021; torchvision's operation set and ranges);
      ``flip_p=0.5`` flips each image left-right first (torchvision's ImageNet recipe, whose crop is the
      dataset's: :class:`~lightning_efficient.FastImageFolder`); ``"rand_augment"`` takes ``flip_p`` too;
    - ``"rand_augment"``: RandAugment (Cubuk et al. 2020; torchvision defaults ``num_ops=2, magnitude=9``);
    - ``"imagenet"``: RandomResizedCrop + horizontal flip (option ``size=`` to change the output size);
    - ``"cifar"``: pad-4-and-crop + horizontal flip;
    - ``"flip"``: horizontal flip only (``flip_p``, default 0.5), for a dataset that crops already: short runs (a
      few epochs) reach a higher top-1 sooner without a policy (fastai's milder default; see the peers
      benchmark).

    Any callable or ``nn.Module`` (e.g. ``kornia.augmentation.AugmentationSequential``) taking and returning a
    float ``[B, C, H, W]`` batch in ``[0, 1]`` works too. The callback holds it (it is never a submodule of the
    LightningModule) and freezes its parameters, so nothing of the augmentation reaches ``model.parameters()``,
    the optimizer, ``state_dict()`` or checkpoints. Note Kornia's ``auto`` policies choose one operation per
    batch; the presets here choose per image.

    Randomness: presets draw from the callback's own ``torch.Generator`` on the batch's device, seeded from
    ``seed`` (or, when ``None``, from ``torch.initial_seed()``, which ``seed_everything`` sets) plus the global
    rank. Runs are therefore reproducible under ``seed_everything``, DDP ranks draw differently even though
    ``seed_everything`` gives every rank the same global seed (``workers=True`` only changes DataLoader worker
    seeds), and the global RNG (dropout, ...) is not consumed. Custom callables draw from the global RNG inside
    :func:`torch.random.fork_rng`, seeded per call from the callback's generator, so the same properties hold
    for them. The generator state is saved in checkpoints (``state_dict``; under DDP every rank's),
    so a resumed run, also one resumed mid-epoch, continues each rank's stream.

    Args:
        augmentation: preset name (see above), callable / ``nn.Module``, or ``None`` to only convert and normalise.
        mean: per-channel means in ``[0, 1]`` units (each in ``[0, 1]``), e.g. :data:`IMAGENET_MEAN`; ``None``
            skips normalisation.
        std: per-channel standard deviations in ``[0, 1]`` units (each in ``(0, 1]``), e.g.
            :data:`IMAGENET_STD`; given together with ``mean``.
        image_key: where the image tensor is in a batch: an index for tuple/list batches (default ``0``, as in
            ``(images, targets)``), a key for dict batches (e.g. ``"image"``). A bare tensor batch is the image.
        mask_key: index/key of optional segmentation masks ``[B, H, W]`` or ``[B, K, H, W]`` (any dtype: integer,
            ``bool`` or floating). They get the same geometric transform with nearest interpolation and are not
            normalised; they leave the callback with the shape (up to a preset's ``size=``) and dtype they came
            in with in every stage, whatever augments them: a custom callable's ``[B, 1, H, W]`` answer to
            ``[B, H, W]`` masks (Kornia's ``AugmentationSequential``, kornia#4750) is squeezed back, float answers
            to integer labels are rounded back (:func:`~lightning_efficient.functional.augment.restore_masks`).
        seed: base seed of the callback's generator; ``None`` derives it from ``torch.initial_seed()``.
        log_images: log a grid of the first augmented training batch (up to 16 images, before normalisation)
            to the Trainer's logger at the first training step (TensorBoard ``add_image``; other loggers: skipped
            with an info message).
        **augmentation_kwargs: options of the preset, e.g. ``num_ops=2, magnitude=9`` (``"rand_augment"``),
            ``size=224`` (``"imagenet"``), ``flip_p=0.5`` (``"trivial_augment"``, ``"rand_augment"``),
            ``interpolation="bilinear"``.

    Raises:
        ValueError: unknown preset or preset option, ``mean`` without ``std`` (or vice versa), non-positive ``std``,
            ``mean``/``std`` in 0-255 units (a mean outside ``[0, 1]`` or a std above 1; the message gives the
            values divided by 255), or at run time a batch without an image tensor at ``image_key``, with a
            channel count that does not match ``mean``/``std``, or masks a custom callable returned in a layout
            that cannot be mapped back (other batch size, channel count or spatial size than its images).
        TypeError: ``augmentation`` neither a string nor callable; images not ``uint8``/floating.

    Warns:
        UserWarning, once per ``setup``, when the first training batch or the first batch of the other stages
        (e.g. the sanity check's) holds float images clearly outside ``[0, 1]``
        (beyond :data:`~lightning_efficient.functional.augment.convert.UNIT_RANGE_TOLERANCE`): images the
        dataset normalised already (they would be normalised twice, and the augmentations clamp to ``[0, 1]``),
        floats in 0-255 units, or noise. The message names the range and the fix. Only those two first batches
        are read back to the host (one synchronisation each); later batches are not checked and cost nothing.
        ``uint8`` batches are never read.

    Example:
        ```python
        from lightning_efficient import (
            IMAGENET_MEAN, IMAGENET_STD, GPUAugmentation
        )

        augment = GPUAugmentation(
            "trivial_augment", mean=IMAGENET_MEAN, std=IMAGENET_STD
        )
        trainer = pl.Trainer(callbacks=[augment])
        ```
    """

    def __init__(
        self,
        augmentation: Union[str, Callable[..., Any], None] = "trivial_augment",
        *,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        image_key: Union[int, str] = 0,
        mask_key: Union[int, str, None] = None,
        seed: Optional[int] = None,
        log_images: bool = False,
        **augmentation_kwargs: Any,
    ) -> None:
        if (mean is None) != (std is None):
            raise ValueError("Give both `mean` and `std` (in [0, 1] units) to normalise, or neither.")
        if mean is not None and std is not None:
            check_normalization_stats(mean, std)
        if mask_key is not None and mask_key == image_key:
            raise ValueError(f"`mask_key` and `image_key` are both {image_key!r}; they must differ.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"`seed` must be an int or None, got {seed!r}.")
        self.augmentation = augmentation
        self._augment = None if augmentation is None else build_augmentation(augmentation, **augmentation_kwargs)
        self.mean = None if mean is None else tuple(float(m) for m in torch.as_tensor(mean).flatten().tolist())
        self.std = None if std is None else tuple(float(s) for s in torch.as_tensor(std).flatten().tolist())
        self.image_key = image_key
        self.mask_key = mask_key
        self.seed = seed
        self.log_images = log_images
        self._trainer: Optional[pl.Trainer] = None
        self._owner: Any = None
        self._base_seed: Optional[int] = None
        self._generators: dict[str, torch.Generator] = {}
        self._pending_states: dict[str, Tensor] = {}
        self._dtype_of: tuple[Any, torch.dtype] = (None, torch.float32)  # (precision plugin, its input dtype)
        self._logged = False
        # value range of the first augmented (training) batch and of the first other one: <= 2 host reads per setup
        self._input_checked: dict[bool, bool] = {}  # augment flag -> whether that check warned

    # ---------------------------------------------------------------------------------------------- Lightning
    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        self._trainer = trainer
        base = self.seed if self.seed is not None else torch.initial_seed()
        self._base_seed = (int(base) * _SEED_MIX + 1_000_003 * (trainer.global_rank + 1)) % (2**63)
        self._generators = {}
        self._logged = False
        self._input_checked = {}
        self._owner = add_stage(trainer, pl_module, _NAME, self._transform, "augment")  # a BatchPipeline

    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if self._owner is not None:
            self._owner.remove(_NAME)
        self._owner = None
        self._trainer = None

    def efficiency_facts(self) -> dict[str, Any]:
        """For :class:`~lightning_efficient.EfficiencyReport`: training batches are augmented on the device."""
        return {"device_augmentation": self._augment is not None}

    def state_dict(self) -> dict[str, Any]:
        """Generator states per device (``uint8`` CPU tensors), so a resumed run continues the random stream.

        Under DDP every rank's state of the training device is gathered (``rank_states``, in rank order): a
        checkpoint holds rank 0's callback state only, and each rank draws its own stream. ``state_dict`` then
        runs on every rank, as Lightning's ``save_checkpoint`` does.
        """
        states = {dev: g.get_state() for dev, g in self._generators.items()}
        trainer = self._trainer
        if trainer is None or trainer.world_size < 2:
            return {"generator_states": states}
        device = trainer.strategy.root_device
        mine = self.generator(device).get_state().to(device=device, dtype=torch.int64)
        gathered = trainer.strategy.all_gather(mine).reshape(trainer.world_size, -1)
        ranks = [row.to("cpu", torch.uint8) for row in gathered]
        return {"generator_states": states, "rank_states": {"device": device.type, "states": ranks}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_states = dict(state_dict.get("generator_states", {}))
        trainer, ranks = self._trainer, state_dict.get("rank_states")
        if trainer is not None and ranks and len(ranks["states"]) == trainer.world_size:
            device = trainer.strategy.root_device
            if device.type == ranks["device"]:  # this rank's own stream
                self._pending_states[str(device)] = ranks["states"][trainer.global_rank]
        for dev, g in self._generators.items():
            if dev in self._pending_states:
                g.set_state(self._pending_states.pop(dev))

    # ------------------------------------------------------------------------------------------------ batches
    def generator(self, device: torch.device) -> torch.Generator:
        """The callback's generator on ``device`` (created and seeded on first use).

        Args:
            device: the device the batches are augmented on.
        """
        key = str(device)
        g = self._generators.get(key)
        if g is None:
            g = torch.Generator(device=device)
            base = self._base_seed
            if base is None:  # used outside a Trainer
                base = int(self.seed if self.seed is not None else torch.initial_seed()) * _SEED_MIX % (2**63)
            g.manual_seed(base)
            if key in self._pending_states:
                g.set_state(self._pending_states.pop(key))
            self._generators[key] = g
        return g

    def _should_augment(self) -> bool:
        t = self._trainer
        return self._augment is not None and t is not None and t.training and not t.sanity_checking

    def _output_dtype(self) -> torch.dtype:
        plugin = getattr(self._trainer, "precision_plugin", None)
        if plugin is None:  # no Trainer attached: process()'s default
            return torch.float32
        if self._dtype_of[0] is not plugin:  # asked once per plugin (it warns at most once)
            self._dtype_of = (plugin, precision_input_dtype(plugin))
        return self._dtype_of[1]

    def _transform(self, batch: Any, dataloader_idx: int = 0) -> Any:
        return self.process(batch, augment=self._should_augment(), dtype=self._output_dtype())

    def process(self, batch: Any, *, augment: bool = True, dtype: torch.dtype = torch.float32) -> Any:
        """What the callback does to one batch: convert, optionally augment, normalise, cast.

        Args:
            batch: a tensor ``[B, C, H, W]``, a tuple/list or a dict holding it at ``image_key`` (and masks at
                ``mask_key``). Other entries are passed through unchanged.
            augment: apply the augmentation (the callback passes ``True`` for training batches only).
            dtype: floating dtype of the returned images (the work is done in float32 before this cast).

        Returns:
            A batch of the same structure (tuples stay tuples, namedtuples stay namedtuples, dicts keep their
            class), with the image tensor replaced by a ``dtype`` tensor ``[B, C, H', W']`` (``H', W'`` differ from
            the input only for the ``"imagenet"`` preset with ``size=``), and masks replaced when augmented (same
            rank and dtype as given, spatial size ``H', W'``).

        Raises:
            ValueError: no image tensor at ``image_key``, a channel count that does not match ``mean``/``std``, or
                masks a custom callable returned in a layout that cannot be mapped back onto the given one.
            TypeError: images neither ``uint8`` nor floating, or an augmentation that returns no ``[B, C, H, W]``
                tensor.

        Warns:
            UserWarning: on the first call after ``setup`` with this ``augment`` value, float images clearly
                outside ``[0, 1]`` (see the class's *Warns*).
        """
        with torch.no_grad():
            images = self._get(batch, self.image_key, "image_key")
            masks = self._get(batch, self.mask_key, "mask_key") if self.mask_key is not None else None
            # the first training batch, and the first of the others, until one of them warned
            if augment not in self._input_checked and True not in self._input_checked.values():
                self._input_checked[augment] = self._check_value_range(images)
            x = to_float(images)
            if augment and self._augment is not None:
                g = self.generator(x.device)
                if callable(self.augmentation) and not isinstance(self.augmentation, str):
                    seed = int(torch.randint(2**62, (1,), generator=g, device=g.device).item())
                    devices = [x.device] if x.device.type == "cuda" else []
                    with torch.random.fork_rng(devices=devices, device_type=x.device.type if devices else "cuda"):
                        torch.manual_seed(seed)
                        out = self._augment(x, masks, None)
                else:
                    scale = getattr(self._owner, "image_scale", 1.0)  # ProgressiveResize's side / final side
                    takes = getattr(self._augment, "takes", None)
                    extra = {"pixel_scale": scale} if scale != 1.0 and takes and takes("pixel_scale") else {}
                    out = self._augment(x, masks, g, **extra)
                if masks is not None:
                    x, masks = out
                else:
                    x = out
                if not isinstance(x, Tensor) or x.ndim != 4:
                    raise TypeError(
                        f"The augmentation must return a [B, C, H, W] tensor, got {type(x).__name__}"
                        f"{'' if not isinstance(x, Tensor) else ' of shape ' + str(tuple(x.shape))}."
                    )
                x = x.float()
                self._maybe_log(x)
            if self.mean is not None and self.std is not None:
                x = normalize(x, self.mean, self.std)
            x = x.to(dtype)
            batch = replace_entry(batch, self.image_key, x)
            if masks is not None and self.mask_key is not None:
                batch = replace_entry(batch, self.mask_key, masks)
            return batch

    def _check_value_range(self, images: Tensor) -> bool:
        """Warn when float images are clearly not in ``[0, 1]`` (returns whether it warned); one host read, of
        this batch only."""
        if self._augment is None and self.mean is None:
            return False  # nothing here assumes [0, 1]: the batch is only cast
        problem = unit_range_problem(images)
        if problem is None:
            return False
        consequence = []
        if self.mean is not None:
            consequence.append(f"normalised a second time with mean={self.mean}, std={self.std}")
        if self._augment is not None:
            consequence.append("augmented as if in [0, 1] (the presets' colour operations clamp to [0, 1])")
        rank_zero_warn(
            f"GPUAugmentation expects uint8 images (0..255) or float images in [0, 1], but the first batch holds "
            f"{problem}: they look normalised already (e.g. a `Normalize` in the dataset's transforms), in 0-255 "
            f"units, or not images at all. They would be {' and '.join(consequence)}. Fix: let the dataset return "
            "uint8 images (e.g. `transforms.PILToTensor()` or FastImageFolder) or float images in [0, 1] "
            "(`ToTensor()` / divide by 255) and normalise only here with `mean=`/`std=`; or, to keep the dataset's "
            "normalisation, drop `mean`/`std` and `augmentation` from GPUAugmentation."
        )
        return True

    def _get(self, batch: Any, key: Union[int, str], what: str) -> Tensor:
        """The tensor at ``key`` (``what``: ``"image_key"`` or ``"mask_key"``); a bare tensor batch is the images."""
        bare_ok = what == "image_key" and isinstance(batch, Tensor)
        value = get_entry(batch, key, who="GPUAugmentation", option=what, bare_ok=bare_ok)
        if not isinstance(value, Tensor) or value.ndim != 4 and what == "image_key":
            shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(
                f"GPUAugmentation: batch[{key!r}] must be an image tensor [B, C, H, W], got {shape}; "
                f"set `{what}=` to where the images are."
            )
        return value

    def _maybe_log(self, x: Tensor) -> None:
        if not self.log_images or self._logged or self._trainer is None:
            return
        self._logged = True
        trainer = self._trainer
        logger = trainer.logger
        experiment = getattr(logger, "experiment", None) if logger is not None else None
        if experiment is None or not hasattr(experiment, "add_image"):
            rank_zero_info(
                f"GPUAugmentation(log_images=True): logger {type(logger).__name__} cannot log images "
                "(needs TensorBoard's `add_image`); skipped. Use `preview()` in a notebook instead."
            )
            return
        if trainer.global_rank != 0:
            return
        try:
            grid = preview(x[:16].detach(), lambda t: t, nrow=8)
            experiment.add_image("gpu_augmentation/train_batch", grid, global_step=trainer.global_step)
        except Exception as err:  # noqa: BLE001 - logging must never break training
            rank_zero_warn(f"GPUAugmentation could not log images: {err}")
