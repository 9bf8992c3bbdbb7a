"""StepwiseLR callback (STUB: being implemented)."""
from pytorch_lightning import Callback


class StepwiseLR(Callback):
    pass
