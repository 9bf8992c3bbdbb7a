"""ChannelsLast callback (STUB: being implemented)."""
from pytorch_lightning import Callback


class ChannelsLast(Callback):
    pass
