"""tune(): measure the practices on the user's own model, data and hardware, within a time budget.

One package, shaped like Lightning's ``tuner/``: :mod:`~lightning_efficient.tuning.tuner` is the front
end (:func:`~lightning_efficient.tune`: argument checks, the fits, the search, the store),
:mod:`~lightning_efficient.tuning.policy` the whole policy (the verdict, its bounds, the budget, which
values are tried, when a stored decision is measured again, the search),
:mod:`~lightning_efficient.tuning.records` its named records, :mod:`~lightning_efficient.tuning.fits` and
:mod:`~lightning_efficient.tuning.probe` the measuring fits, :mod:`~lightning_efficient.tuning.result`
the :class:`~lightning_efficient.TuneResult` and :mod:`~lightning_efficient.tuning.store` the decisions
kept between processes. ``lightning_efficient.tune`` is the function; this package imports nothing on its
own.
"""
