"""lightning_efficient: PyTorch Lightning callbacks for fast CNN training.

Add them to the ``Trainer`` you already have::

    import pytorch_lightning as pl
    from lightning_efficient import recipe

    trainer = pl.Trainer(max_epochs=10, **recipe())

Public API:

- :class:`ChannelsLast`: model conv weights and 4-D float batch tensors in ``torch.channels_last`` (NHWC).
- :class:`StepwiseLR`: epoch-interval LR schedulers run exactly at every optimizer step.
- :class:`GPUAugmentation`: per-sample augmentation of training batches on the device (Kornia).
- :class:`GPUDecode`: batched JPEG decoding on the device (nvJPEG) for ``FastImageFolder(backend="nvjpeg")``.
- :class:`BatchPipeline` / :func:`get_pipeline`: what the callbacks above do to each batch on the device, in
  which order (``print(get_pipeline(trainer))``).
- :class:`EfficiencyReport`: where the step time goes (data wait vs compute), images/s, peak memory.
- :class:`FastImageFolder`: ImageFolder-compatible dataset yielding fixed-size ``uint8`` ``[3, H, W]`` tensors.
- :func:`recommended_precision`: Lightning's precision string for this hardware.
- :func:`recipe`: ``Trainer`` keyword arguments with all of the above.
- :func:`doctor_report`: the environment checks of ``lightning-efficient doctor``, as text;
  :func:`cpu_has_native_bf16`: whether this CPU runs bf16 natively (AVX512-BF16 or AMX).
- :func:`quiet_lightning`: a context in which Lightning's tips and known-harmless warnings are silenced (the
  command-line app's runs and tune()'s fits use it; your own fits are never silenced).
- :func:`tune` / :class:`TuneResult`: measure which settings (precision, channels_last, torch.compile,
  ``num_workers``) train your model fastest here; ``recipe(tune=result)`` applies the choice.
"""

# torch and torchvision must be one matching pair of builds; a mismatch fails deep inside torchvision's import with a
# message that names neither (e.g. "operator torchvision::nms does not exist"). Say what is wrong and how to fix it.
try:
    import torchvision  # noqa: F401
except (ImportError, RuntimeError, OSError) as _err:
    import torch

    _cpu = torch.version.cuda is None
    raise ImportError(
        f"lightning_efficient needs torchvision built for the installed torch {torch.__version__} "
        f"({'a CPU' if _cpu else 'a CUDA'} build); importing torchvision failed ({type(_err).__name__}: {_err}). "
        "The versions must pair (torchvision 0.N with torch 2.(N-15)) and both must be CPU or both CUDA builds. "
        "Install a matching pair in one command, e.g. `pip install torch==2.14.1 torchvision==0.29.1"
        + (" --index-url https://download.pytorch.org/whl/cpu`." if _cpu else "`.")
    ) from _err

# First, before anything imports Lightning: the imports below import both Lightning packages, and each re-points the
# rank-zero logger they share; keep_lightning_logging leaves Lightning's logging as the user's imports set it.
from lightning_efficient.quiet import keep_lightning_logging, quiet_lightning

with keep_lightning_logging():
    from lightning_efficient.callbacks.channels_last import ChannelsLast
    from lightning_efficient.callbacks.efficiency_report import EfficiencyReport
    from lightning_efficient.callbacks.gpu_augmentation import IMAGENET_MEAN, IMAGENET_STD, GPUAugmentation
    from lightning_efficient.callbacks.gpu_decode import GPUDecode
    from lightning_efficient.callbacks.progressive_resize import ProgressiveResize
    from lightning_efficient.callbacks.stepwise_lr import StepwiseLR
    from lightning_efficient.data.decode import ImageDecodeError, pil_flavour
    from lightning_efficient.data.folder import FastImageFolder, uint8_collate
    from lightning_efficient.data.loader import suggest_loader_kwargs
    from lightning_efficient.doctor import doctor_report
    from lightning_efficient.functional.augment import preview
    from lightning_efficient.functional.schedules import plot_schedule, register_schedule, warmup_cosine
    from lightning_efficient.pipeline import BatchPipeline, get_pipeline
    from lightning_efficient.precision import cpu_has_native_bf16, explain_precision, recommended_precision
    from lightning_efficient.recipe import recipe
    from lightning_efficient.tuning.result import TuneResult
    from lightning_efficient.tuning.tuner import tune

__version__ = "0.2.0"  # the one place: pyproject.toml reads it ([tool.setuptools.dynamic]); keep it a literal

__all__ = [
    "BatchPipeline",
    "ChannelsLast",
    "EfficiencyReport",
    "FastImageFolder",
    "GPUAugmentation",
    "GPUDecode",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageDecodeError",
    "ProgressiveResize",
    "StepwiseLR",
    "TuneResult",
    "doctor_report",
    "cpu_has_native_bf16",
    "explain_precision",
    "get_pipeline",
    "pil_flavour",
    "preview",
    "quiet_lightning",
    "recipe",
    "plot_schedule",
    "recommended_precision",
    "register_schedule",
    "suggest_loader_kwargs",
    "tune",
    "uint8_collate",
    "warmup_cosine",
    "__version__",
]
