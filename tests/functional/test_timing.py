"""Step timeline: exact intervals from scripted clocks, lazy reading of device events, the CUDA code path on CPU."""

from __future__ import annotations

import math

import pytest

from lightning_efficient.functional.measurement import Measurement
from lightning_efficient.functional.timing import CudaEventClock, HostEvent, StepTimeline


class ScriptedEvent:
    """A CUDA-like event whose time is set by the test and which becomes readable only when ``done`` is set."""

    def __init__(self, clock: "ScriptedClock") -> None:
        self.clock, self.time, self.done = clock, None, False
        clock.events.append(self)

    def record(self, stream=None) -> None:
        self.time = self.clock.now

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:  # one stream: every event recorded before this one is done too
        for e in self.clock.events[: self.clock.events.index(self) + 1]:
            e.done = True

    def elapsed_time(self, end: "ScriptedEvent") -> float:
        assert self.done and end.done, "read before the device reached the event"
        return 1000.0 * (end.time - self.time)


class ScriptedClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.events: list[ScriptedEvent] = []

    def finish_all(self) -> None:
        for e in self.events:
            e.done = True


def _timeline(skip_first: int = 0) -> tuple[StepTimeline, Measurement, ScriptedClock]:
    script = ScriptedClock()
    timer = Measurement(skip_first=skip_first)
    return StepTimeline(CudaEventClock(lambda: ScriptedEvent(script)), timer), timer, script


def _batch(tl: StepTimeline, script: ScriptedClock, wait: float, transforms: list[float], compute: float) -> None:
    script.now += wait
    for t in transforms:
        tl.start()
        script.now += t
        tl.stop()
    tl.batch_started()
    script.now += compute
    tl.batch_ended(samples=4)


def test_intervals_are_split_exactly_and_only_read_once_the_device_got_there():
    tl, timer, script = _timeline()
    tl.restart()
    _batch(tl, script, wait=0.5, transforms=[0.1, 0.2], compute=2.0)
    _batch(tl, script, wait=0.0, transforms=[0.3], compute=1.0)
    assert timer.steps == 0  # nothing readable yet: no synchronisation, nothing counted
    script.finish_all()
    tl.drain(block=False)
    assert timer.steps == 2 and timer.samples == 8
    assert timer.data_wait_s == pytest.approx(0.5)
    assert timer.transform_s == pytest.approx(0.6)
    assert timer.compute_s == pytest.approx(3.0)


def test_drain_with_block_waits_for_every_pending_batch_in_order():
    tl, timer, script = _timeline(skip_first=1)
    tl.restart()
    _batch(tl, script, wait=9.0, transforms=[], compute=9.0)  # skipped (warm-up)
    _batch(tl, script, wait=1.0, transforms=[], compute=3.0)
    tl.drain(block=True)
    assert (timer.steps, timer.data_wait_s, timer.compute_s) == (1, pytest.approx(1.0), pytest.approx(3.0))


def test_restart_drops_transforms_of_validation_and_resets_the_wait():
    tl, timer, script = _timeline()
    tl.restart()
    tl.start()
    script.now += 5.0  # a validation batch's transforms
    tl.stop()
    script.now += 7.0  # validation itself
    tl.restart()
    _batch(tl, script, wait=0.25, transforms=[0.5], compute=1.0)
    tl.drain(block=True)
    assert timer.data_wait_s == pytest.approx(0.25) and timer.transform_s == pytest.approx(0.5)


def test_host_event_measures_host_time_like_a_cuda_event():
    a, b = HostEvent(), HostEvent()
    a.record()
    b.record()
    assert a.query() and b.query() and 0 <= a.elapsed_time(b) < 1000
    with pytest.raises(RuntimeError):
        HostEvent().elapsed_time(a)


def test_timer_figures_are_nan_before_any_step():
    timer = Measurement()
    assert math.isnan(timer.images_per_s) and math.isnan(timer.data_wait_share)
