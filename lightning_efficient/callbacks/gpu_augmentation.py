"""GPUAugmentation callback (STUB: being implemented)."""
from pytorch_lightning import Callback


class GPUAugmentation(Callback):
    def __init__(self, augmentation="trivial_augment", **kwargs):
        self.augmentation = augmentation
