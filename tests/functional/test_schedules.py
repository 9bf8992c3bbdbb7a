"""Functional core of StepwiseLR: closed forms in fractional epochs vs the real PyTorch schedulers."""

from __future__ import annotations

import math
import pickle
import warnings

import pytest
import torch
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from torch.optim import lr_scheduler as L

from lightning_efficient.functional import schedules as F
from lightning_efficient.functional.position import EpochPosition, optimizer_steps_per_epoch, step_in_epoch
from lightning_efficient.functional.schedules import torch_internals

SETTINGS = settings(max_examples=40, deadline=None)


def make_optimizer(lrs=(0.5, 0.1)) -> torch.optim.Optimizer:
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs]
    return torch.optim.SGD(groups, lr=1.0)


def real_epoch_lrs(scheduler, num_epochs):
    """LRs of epochs 0..num_epochs-1 by stepping the real scheduler (the scheduler is consumed)."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for epoch in range(num_epochs):
            if epoch:
                scheduler.step()
            out.append([g["lr"] for g in scheduler.optimizer.param_groups])
    return out


def pytorch_lr_at(probe, epoch, real):
    """PyTorch's LRs at a fractional ``epoch`` (not an integer), from ``probe``, a scheduler of the same kind.

    ``probe.step(epoch)`` with an explicit epoch uses the class's closed form (``_get_closed_form_lr``), or
    ``get_lr()`` at ``last_epoch = epoch`` (``LambdaLR``: its function at the fractional epoch), or its own
    fractional step (``CosineAnnealingWarmRestarts``). Where PyTorch has no value between epochs, the policy
    of the package is the reference: ``MultiplicativeLR`` goes geometrically between the real boundary LRs
    ``real``; ``ConstantLR``/``LinearLR`` with ``total_iters=0`` keep the epoch-0 value, as PyTorch's
    recursion does (its closed form would not).
    """
    n = math.floor(epoch)
    cls = type(probe)
    if cls is L.MultiplicativeLR:
        return [
            a * (b / a) ** (epoch - n) if a and b / a > 0 else a for a, b in zip(real[n], real[n + 1], strict=False)
        ]
    if cls in (L.ConstantLR, L.LinearLR) and probe.total_iters <= 0:
        return real[n]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # step(epoch) is deprecated
        probe.step(epoch)
    return [g["lr"] for g in probe.optimizer.param_groups]


def assert_steps_match(make, num_epochs, steps_per_epoch, between=True):
    """Update ``k`` of the per-step schedule (``k = 0 .. E*S-1``, at fractional epoch ``k / S``) vs PyTorch.

    At ``k = e * S``: the real scheduler after ``e`` calls of ``step()``. In between (when ``between``):
    :func:`pytorch_lr_at` at ``k / S``. Every param group, to float rounding.
    """
    opt = make_optimizer()
    scheduler = make(opt)
    ours = F.stepwise_lrs(scheduler, steps_per_epoch, num_epochs * steps_per_epoch)
    try:
        real = real_epoch_lrs(scheduler, num_epochs + 1)
    except ZeroDivisionError:  # PyTorch itself fails (e.g. LinearLR(total_iters=0) restarted by SequentialLR)
        reject()
    probe = make(make_optimizer()) if between else None
    base = max(g["initial_lr"] for g in opt.param_groups)
    for k, got in enumerate(ours):
        e, j = divmod(k, steps_per_epoch)
        if j == 0:
            want = real[e]
        elif between:
            want = pytorch_lr_at(probe, k / steps_per_epoch, real)
        else:
            continue
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12 * base), f"update {k} (epoch {k}/{steps_per_epoch})"


factor01 = st.floats(0.05, 1.0)
gamma = st.floats(0.1, 1.0)
S = st.integers(1, 50)

# one strategy per supported class: a function optimizer -> scheduler
SCHEDULERS = {
    "StepLR": st.builds(lambda n, g: lambda o: L.StepLR(o, n, g), st.integers(1, 5), gamma),
    "MultiStepLR": st.builds(
        lambda ms, g: lambda o: L.MultiStepLR(o, ms, g), st.lists(st.integers(1, 12), max_size=4), gamma
    ),
    "ConstantLR": st.builds(lambda f, n: lambda o: L.ConstantLR(o, f, n), factor01, st.integers(0, 6)),
    "LinearLR": st.builds(
        lambda a, b, n: lambda o: L.LinearLR(o, a, b, n), factor01, st.floats(0.0, 1.0), st.integers(0, 8)
    ),
    "ExponentialLR": st.builds(lambda g: lambda o: L.ExponentialLR(o, g), gamma),
    "CosineAnnealingLR": st.builds(
        lambda t, m: lambda o: L.CosineAnnealingLR(o, t, m), st.integers(1, 10), st.sampled_from([0.0, 1e-3, 0.05])
    ),
    "PolynomialLR": st.builds(lambda n, p: lambda o: L.PolynomialLR(o, n, p), st.integers(1, 10), st.floats(0.5, 3.0)),
    "CosineAnnealingWarmRestarts": st.builds(
        lambda t, m, e: lambda o: L.CosineAnnealingWarmRestarts(o, t, m, e),
        st.integers(1, 4),
        st.integers(1, 3),
        st.sampled_from([0.0, 1e-3]),
    ),
    "LambdaLR": st.builds(lambda g: lambda o: L.LambdaLR(o, lambda e: g**e * (1 + 0.1 * e)), gamma),
    "MultiplicativeLR": st.builds(lambda g: lambda o: L.MultiplicativeLR(o, lambda e: g), gamma),
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_every_step_equals_pytorch(name):
    """Every update k at fractional epoch k/S, not only the epoch boundaries."""

    @SETTINGS
    @given(make=SCHEDULERS[name], steps=S, epochs=st.integers(1, 25))
    def check(make, steps, epochs):
        assert_steps_match(make, epochs, steps)

    check()


_CHILD = st.sampled_from(
    [
        "StepLR",
        "MultiStepLR",
        "ConstantLR",
        "LinearLR",
        "ExponentialLR",
        "CosineAnnealingLR",
        "PolynomialLR",
        "CosineAnnealingWarmRestarts",
        "LambdaLR",
    ]
)


@SETTINGS
@given(data=st.data(), steps=S, epochs=st.integers(1, 30))
def test_sequential_lr_boundaries(data, steps, epochs):
    n = data.draw(st.integers(1, 3))
    children = [data.draw(SCHEDULERS[data.draw(_CHILD)]) for _ in range(n)]
    milestones = sorted(data.draw(st.lists(st.integers(1, 12), min_size=n - 1, max_size=n - 1)))

    def make(o):
        return L.SequentialLR(o, [c(o) for c in children], milestones)

    assert_steps_match(make, epochs, steps, between=False)  # PyTorch has no value between epochs here


_CHAIN_CHILD = st.sampled_from(
    [
        "StepLR",
        "MultiStepLR",
        "ConstantLR",
        "LinearLR",
        "ExponentialLR",
        "PolynomialLR",
        "MultiplicativeLR",
        "CosineAnnealingLR",
        "LambdaLR",
        "CosineAnnealingWarmRestarts",
    ]
)


@SETTINGS
@given(data=st.data(), steps=S, epochs=st.integers(1, 30))
def test_chained_scheduler_boundaries(data, steps, epochs):
    """Any mix of children, incl. cosine past T_max (PyTorch's additive restart) and a nested chain."""
    n = data.draw(st.integers(1, 4))
    children = [data.draw(SCHEDULERS[data.draw(_CHAIN_CHILD)]) for _ in range(n)]
    nest_at = data.draw(st.integers(0, n))

    def make(o):
        made = [c(o) for c in children]
        if 0 < nest_at < n:
            made = [L.ChainedScheduler(made[:nest_at]), *made[nest_at:]]
        return L.ChainedScheduler(made)

    assert_steps_match(make, epochs, steps, between=False)  # PyTorch has no value between epochs here


def test_chained_scheduler_is_product_of_factors():
    opt = make_optimizer((1.0,))
    chain = L.ChainedScheduler([L.LinearLR(opt, 0.5, 1.0, 2), L.ExponentialLR(opt, 0.25)])
    assert F.lr_at(chain, 0.5) == pytest.approx([0.625 * 0.5])
    assert F.lr_at(chain, 3.5) == pytest.approx([0.25**3.5])


def test_values_between_boundaries():
    opt = make_optimizer((1.0, 0.1))
    assert F.lr_at(L.CosineAnnealingLR(opt, T_max=4), 2.0) == pytest.approx([0.5, 0.05])
    assert F.lr_at(L.CosineAnnealingLR(make_optimizer((1.0,)), T_max=4), 1.0) == pytest.approx(
        [(1 + math.cos(math.pi / 4)) / 2]
    )
    assert F.lr_at(L.LinearLR(make_optimizer((1.0,)), 0.2, 1.0, total_iters=4), 0.5) == pytest.approx([0.3])
    assert F.lr_at(L.ExponentialLR(make_optimizer((1.0,)), 0.25), 0.5) == pytest.approx([0.5])
    # piecewise-constant schedules stay piecewise constant: the LR changes exactly at the boundary
    step = L.StepLR(make_optimizer((1.0,)), step_size=2, gamma=0.1)
    lrs = [x[0] for x in F.stepwise_lrs(step, steps_per_epoch=3, num_steps=7)]
    assert lrs == pytest.approx([1, 1, 1, 1, 1, 1, 0.1])
    # MultiplicativeLR spreads each epoch's factor geometrically over its steps
    mult = L.MultiplicativeLR(make_optimizer((1.0,)), lambda e: 0.25)
    assert [x[0] for x in F.stepwise_lrs(mult, 2, 5)] == pytest.approx([1, 0.5, 0.25, 0.125, 0.0625])


def test_per_group_base_lrs_and_no_mutation():
    opt = make_optimizer((0.4, 0.04))
    sched = L.SequentialLR(opt, [L.LinearLR(opt, 0.5, 1.0, 2), L.ExponentialLR(opt, 0.5)], [2])
    state = sched.state_dict()
    lrs = F.stepwise_lrs(sched, steps_per_epoch=4, num_steps=16)
    assert all(a == pytest.approx(10 * b) for a, b in lrs)
    assert lrs[0] == pytest.approx([0.2, 0.02])  # no lag: update 0 uses f(0)
    assert lrs[3] == pytest.approx([0.4 * (0.5 + 0.5 * 3 / 8)] * 1 + [0.04 * (0.5 + 0.5 * 3 / 8)])
    assert sched.state_dict()["last_epoch"] == state["last_epoch"]
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.2, 0.02])


def test_lambda_lr_fractional_and_integer_only_functions():
    opt = make_optimizer((1.0,))
    table = [1.0, 0.5, 0.25, 0.125]
    with pytest.warns(UserWarning, match="epoch resolution"):
        sched = L.LambdaLR(opt, lambda e: table[e])
        fn = F.schedule_function(sched)
    assert [fn(k / 4)[0] for k in range(12)] == [table[k // 4] for k in range(12)]
    smooth = F.schedule_function(L.LambdaLR(make_optimizer((1.0,)), lambda e: 1.0 / (1.0 + e)))
    assert smooth(0.5) == pytest.approx([1 / 1.5])


def test_unsupported_schedulers_raise_clear_errors():
    opt = make_optimizer()

    class MyLR(L.LRScheduler):
        def get_lr(self):
            return [b * 0.5**self.last_epoch for b in self.base_lrs]

    with pytest.raises(F.UnsupportedSchedulerError, match="MyLR.*register_schedule"):
        F.schedule_function(MyLR(opt))
    with pytest.raises(F.UnsupportedSchedulerError, match="OneCycleLR.*interval"):
        F.schedule_function(L.OneCycleLR(opt, max_lr=1.0, total_steps=10))
    with pytest.raises(F.UnsupportedSchedulerError, match="ReduceLROnPlateau"):
        F.schedule_function(L.ReduceLROnPlateau(opt))
    opt2 = make_optimizer()
    seq = L.SequentialLR(opt2, [L.ConstantLR(opt2, 0.5, 1), L.ExponentialLR(opt2, 0.9)], [1])
    chained = L.ChainedScheduler([seq, L.ExponentialLR(opt2, 0.9)])
    with pytest.raises(F.UnsupportedSchedulerError, match="ChainedScheduler with a SequentialLR child"):
        F.schedule_function(chained)
    assert not F.is_supported(chained)
    with pytest.raises(F.UnsupportedSchedulerError, match="MyLR"):
        F.schedule_function(L.SequentialLR(opt, [L.ConstantLR(opt, 0.5, 1), MyLR(opt)], [1]))
    with pytest.raises(ValueError, match="steps_per_epoch"):
        F.stepwise_lrs(L.ExponentialLR(make_optimizer(), 0.9), steps_per_epoch=0, num_steps=3)
    with pytest.raises(ValueError, match="epoch"):
        F.lr_at(L.ExponentialLR(make_optimizer(), 0.9), -1.0)


def test_register_schedule_for_own_class():
    class HalvingLR(L.LRScheduler):
        def get_lr(self):
            return [b * 0.5**self.last_epoch for b in self.base_lrs]

    F.register_schedule(HalvingLR, lambda s: lambda e: [b * 0.5**e for b in s.base_lrs], multiplicative=True)
    try:
        assert_steps_match(HalvingLR, 6, 3)  # get_lr() at a fractional last_epoch is the reference between
        assert F.lr_at(HalvingLR(make_optimizer((1.0,))), 0.5) == pytest.approx([2**-0.5])
        opt = make_optimizer((1.0,))
        chain = L.ChainedScheduler([HalvingLR(opt), L.ExponentialLR(opt, 0.5)])
        assert F.lr_at(chain, 2.0) == pytest.approx([0.5**4])
    finally:
        F.unregister_schedule(HalvingLR)
    assert not F.is_supported(HalvingLR(make_optimizer()))


@SETTINGS
@given(
    warmup=st.floats(0.0, 5.0),
    length=st.floats(0.5, 20.0),
    start=st.floats(0.0, 1.0),
    final=st.floats(0.0, 0.5),
)
def test_warmup_cosine_shape(warmup, length, start, final):
    sched = F.warmup_cosine(warmup_epochs=warmup, total_epochs=warmup + length, start_factor=start, final_factor=final)
    assert sched(0.0) == pytest.approx(start if warmup > 0 else 1.0)
    assert sched(warmup) == pytest.approx(1.0)
    assert sched(warmup + length / 2) == pytest.approx((1 + final) / 2)
    assert sched(warmup + length) == pytest.approx(final)
    assert sched(warmup + 2 * length) == pytest.approx(final)
    xs = [warmup + length * i / 20 for i in range(21)]
    values = [sched(x) for x in xs]
    assert all(a >= b - 1e-12 for a, b in zip(values, values[1:], strict=False))  # non-increasing after warmup


def test_warmup_cosine_errors_and_lambda_lr_use():
    with pytest.raises(ValueError, match="total_epochs"):
        F.warmup_cosine(warmup_epochs=5, total_epochs=3)
    with pytest.raises(ValueError, match="warmup_epochs"):
        F.warmup_cosine(warmup_epochs=-1)
    open_ended = F.warmup_cosine(warmup_epochs=2)
    assert open_ended(1.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="StepwiseLR"):
        open_ended(3.0)
    opt = make_optimizer((1.0,))
    sched = L.LambdaLR(opt, F.warmup_cosine(warmup_epochs=1, total_epochs=3))
    assert F.schedule_horizon(sched) == 3.0
    lrs = [x[0] for x in F.stepwise_lrs(sched, steps_per_epoch=4, num_steps=13)]
    assert lrs[:5] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert lrs[8] == pytest.approx(0.5) and lrs[12] == pytest.approx(0.0)


def test_schedule_horizon():
    opt = make_optimizer()
    assert F.schedule_horizon(L.CosineAnnealingLR(opt, T_max=7)) == 7
    assert F.schedule_horizon(L.StepLR(opt, 3)) is None
    seq = L.SequentialLR(opt, [L.LinearLR(opt, 0.5, 1, 2), L.CosineAnnealingLR(opt, 10)], [2])
    assert F.schedule_horizon(seq) == 12


def test_epochwise_lrs_leaves_scheduler_alone():
    opt = make_optimizer((1.0,))
    sched = L.StepLR(opt, step_size=1, gamma=0.5)
    assert [x[0] for x in F.epochwise_lrs(sched, 3)] == pytest.approx([1.0, 0.5, 0.25])
    assert sched.last_epoch == 0 and opt.param_groups[0]["lr"] == 1.0


def test_plot_schedule():
    import matplotlib

    matplotlib.use("Agg")
    opt = make_optimizer()
    fig = F.plot_schedule(L.CosineAnnealingLR(opt, T_max=3), steps_per_epoch=5, num_epochs=3, param_group=1)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2
    stepwise = list(lines[1].get_ydata())
    assert stepwise[0] == pytest.approx(0.1) and len(stepwise) == 15
    assert list(lines[0].get_ydata())[5] == pytest.approx(0.1 * (1 + math.cos(math.pi / 3)) / 2)
    with pytest.raises(ValueError, match="param_group"):
        F.plot_schedule(L.CosineAnnealingLR(make_optimizer(), T_max=3), 5, 3, param_group=2)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_torch_internals_still_exist():
    """Fails loudly when a torch release renames the private attributes that torch_internals reads."""
    opt = make_optimizer()
    a, b = L.ConstantLR(opt, 0.5, 2), L.ExponentialLR(opt, 0.9)
    seq = L.SequentialLR(opt, [a, b], [2])
    assert torch_internals.child_schedulers(seq) == [a, b], f"SequentialLR._schedulers: {torch.__version__}"
    assert torch_internals.milestones(seq) == [2], f"SequentialLR._milestones: {torch.__version__}"
    chain = L.ChainedScheduler([a, b])
    assert torch_internals.child_schedulers(chain) == [a, b], f"ChainedScheduler._schedulers: {torch.__version__}"
    assert torch_internals.child_schedulers(a) == []
    assert list(torch_internals.walk_schedulers(L.ChainedScheduler([seq, b])))[1:] == [seq, a, b, b]
    # the guard: without the attribute, a clear UnsupportedSchedulerError (StepwiseLR then leaves it epoch-wise)
    del chain._schedulers
    with pytest.raises(F.UnsupportedSchedulerError, match="_schedulers.*torch_internals"):
        F.schedule_function(chain)
    del seq._milestones
    with pytest.raises(F.UnsupportedSchedulerError, match="_milestones"):
        F.schedule_function(seq)


def _halve(epoch):
    return 0.5


def _ramp(epoch):
    return 1.0 / (1.0 + epoch)


# one scheduler per converted family; module-level functions so that the user's part pickles too
PICKLED = {
    "StepLR": lambda o: L.StepLR(o, 2, 0.5),
    "MultiStepLR": lambda o: L.MultiStepLR(o, [1, 3], 0.5),
    "ConstantLR": lambda o: L.ConstantLR(o, 0.5, 2),
    "LinearLR": lambda o: L.LinearLR(o, 0.2, 1.0, 3),
    "ExponentialLR": lambda o: L.ExponentialLR(o, 0.8),
    "PolynomialLR": lambda o: L.PolynomialLR(o, 6, 2.0),
    "CosineAnnealingLR": lambda o: L.CosineAnnealingLR(o, 4, 0.01),
    "CosineAnnealingWarmRestarts": lambda o: L.CosineAnnealingWarmRestarts(o, 2, 2, 0.01),
    "LambdaLR": lambda o: L.LambdaLR(o, [F.warmup_cosine(1, total_epochs=6), _ramp]),
    "MultiplicativeLR": lambda o: L.MultiplicativeLR(o, _halve),
    "SequentialLR": lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.5, 1.0, 2), L.ConstantLR(o, 0.5, 0)], [2]),
    "ChainedScheduler": lambda o: L.ChainedScheduler(
        [L.MultiplicativeLR(o, _halve), L.CosineAnnealingLR(o, 3), L.LambdaLR(o, _ramp), L.StepLR(o, 2)]
    ),
}


@pytest.mark.parametrize("name", sorted(PICKLED))
def test_schedule_functions_pickle(name):
    """Schedule functions are module-level objects, not closures: a Trainer holding one can be saved."""
    fn = F.schedule_function(PICKLED[name](make_optimizer()))
    epochs = (0, 0.5, 1.25, 3.0, 7.5)
    before = [fn(e) for e in epochs]
    clone = pickle.loads(pickle.dumps(fn))
    assert [clone(e) for e in epochs] == before
    assert torch.load(_saved(fn), weights_only=False)(2.5) == fn(2.5)


def _saved(obj):
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def test_epoch_schedules_follow_run():
    open_ended, fixed = F.warmup_cosine(1), F.warmup_cosine(1, total_epochs=5)
    opt = make_optimizer()
    seq = L.SequentialLR(opt, [L.LambdaLR(opt, [open_ended, fixed]), L.ExponentialLR(opt, 0.9)], [2])
    assert F.epoch_schedules(seq) == [open_ended, fixed]
    assert F.epoch_schedules(L.ExponentialLR(make_optimizer(), 0.9)) == []
    assert open_ended.follows_run and not fixed.follows_run
    assert open_ended.follow_run(4) and open_ended.total_epochs == 4.0 and open_ended.total_from_run
    assert open_ended.follow_run(2.5) and open_ended.total_epochs == 2.5  # a later run re-binds
    assert not fixed.follow_run(4) and fixed.total_epochs == 5.0  # the user's horizon is kept
    with pytest.raises(ValueError, match="total_epochs"):
        F.warmup_cosine(1).follow_run(float("nan"))
    state = L.LambdaLR(make_optimizer((1.0,)), open_ended).state_dict()  # the binding travels in checkpoints
    assert state["lr_lambdas"][0]["total_from_run"] is True


def test_public_names_still_importable():
    """Everything importable from the former module lightning_efficient/functional/schedules.py still is."""
    from lightning_efficient.functional.schedules import (  # noqa: F401
        Converter,
        EpochSchedule,
        ScheduleFn,
        UnsupportedSchedulerError,
        epochwise_lrs,
        is_supported,
        lr_at,
        plot_schedule,
        register_schedule,
        schedule_function,
        schedule_horizon,
        scheduler_epoch,
        stepwise_lrs,
        unregister_schedule,
        warmup_cosine,
    )


@pytest.mark.parametrize("name", sorted(PICKLED))
def test_scheduler_epoch_counts_steps_and_locates_the_closed_form(name):
    """``scheduler_epoch`` is the integer epoch ``n`` with ``fn(n)`` = the scheduler's LRs (ChainedScheduler too)."""
    scheduler = PICKLED[name](make_optimizer())
    fn = F.schedule_function(scheduler)
    for n in range(5):
        assert F.scheduler_epoch(scheduler) == n
        assert fn(float(n)) == pytest.approx(scheduler.get_last_lr(), rel=1e-9, abs=1e-12)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            scheduler.step()
    with pytest.raises(TypeError, match="last_epoch"):
        F.scheduler_epoch(object())


# ------------------------------------------------------------------ positions in fractional epochs


@SETTINGS
@given(batches=st.integers(1, 50), accumulate=st.integers(1, 8), epoch=st.integers(0, 5))
def test_position_of_every_batch_of_a_full_epoch(batches, accumulate, epoch):
    """A full epoch's batches sit at ``epoch + k / S`` with ``k`` = 0 .. S - 1 (a partial last window is update
    S - 1); the next epoch starts at ``epoch + 1``."""
    steps = optimizer_steps_per_epoch(batches, accumulate)
    assert steps == math.ceil(batches / accumulate)
    ks = [step_in_epoch(b, accumulate) for b in range(batches)]
    assert sorted(set(ks)) == list(range(steps))
    positions = [float(EpochPosition(epoch, k, steps)) for k in ks]
    assert positions == sorted(positions) and positions[0] == epoch
    assert max(positions) < epoch + 1 == float(EpochPosition(epoch + 1, 0, steps))


def test_position_of_a_short_and_a_long_epoch():
    short = EpochPosition(epoch=2, step=3, steps_per_epoch=10)  # an epoch that ends here: the next starts at 3.0
    assert (short.fraction, float(short), short.overrun) == (0.3, 2.3, False)
    assert float(EpochPosition(3, 0, 10)) == 3.0
    long = EpochPosition(epoch=2, step=12, steps_per_epoch=10)  # more updates than planned: holds at 3.0
    assert (long.fraction, float(long), long.overrun) == (1.0, 3.0, True)
    assert optimizer_steps_per_epoch(0, 4) == 1  # no batch: no update, any S >= 1


def test_positions_drive_stepwise_lrs():
    """``stepwise_lrs`` is the closed form at the positions of consecutive full epochs."""
    fn = F.schedule_function(L.CosineAnnealingLR(make_optimizer(), T_max=3))
    want = F.stepwise_lrs(L.CosineAnnealingLR(make_optimizer(), T_max=3), steps_per_epoch=4, num_steps=12)
    got = [fn(float(EpochPosition(k // 4, k % 4, 4))) for k in range(12)]
    for a, b in zip(got, want, strict=True):
        assert a == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize("args", [(-1, 0, 1), (0, -1, 1), (0, 0, 0), (0.5, 0, 1), (True, 0, 1), (0, 0, 2.0)], ids=repr)
def test_position_rejects_fields_out_of_range(args):
    with pytest.raises(ValueError, match="EpochPosition"):
        EpochPosition(*args)


def test_steps_per_epoch_and_step_in_epoch_reject_bad_counts():
    with pytest.raises(ValueError, match="num_batches"):
        optimizer_steps_per_epoch(-1)
    with pytest.raises(ValueError, match="accumulate_grad_batches"):
        optimizer_steps_per_epoch(4, 0)
    with pytest.raises(ValueError, match="batch_idx"):
        step_in_epoch(-1)
    with pytest.raises(ValueError, match="accumulate_grad_batches"):
        step_in_epoch(3, 0)
