"""EfficiencyReport callback (STUB: being implemented)."""
from pytorch_lightning import Callback


class EfficiencyReport(Callback):
    pass
