"""Rebuilding a DataLoader with another worker count: ``can_rebuild`` and ``with_num_workers``
(``lightning_efficient.data.loader``), which ``tune()`` and ``TuneResult.dataloader`` use."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler, TensorDataset

from lightning_efficient.data.loader import can_rebuild, with_num_workers


class Stream(IterableDataset):
    def __iter__(self):
        yield from range(4)


def _dataset(n: int = 22) -> TensorDataset:
    g = torch.Generator().manual_seed(3)
    return TensorDataset(torch.randn(n, 3, 4, 4, generator=g), torch.arange(n))


def _collate(items):
    images, ids = zip(*items, strict=False)
    return {"images": torch.stack(images), "ids": torch.stack(ids)}


def _init_worker(worker_id: int) -> None:  # module level: picklable
    pass


def _batches(loader: DataLoader, generator: torch.Generator, seed: int = 0) -> list:
    generator.manual_seed(seed)
    return list(loader)


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=False):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k])


def test_with_num_workers_keeps_everything_but_the_workers():
    g = torch.Generator()
    loader = DataLoader(
        _dataset(),
        batch_size=4,
        shuffle=True,
        drop_last=True,
        collate_fn=_collate,
        generator=g,
        worker_init_fn=_init_worker,
        timeout=7.0,
    )
    for n in (0, 1, 2):
        new = with_num_workers(loader, n)
        assert new is not loader and new.num_workers == n
        assert new.dataset is loader.dataset and new.batch_sampler is loader.batch_sampler
        assert new.collate_fn is _collate and new.generator is g and new.worker_init_fn is _init_worker
        assert new.timeout == 7.0 and new.pin_memory is False
        assert new.batch_sampler.drop_last is True and new.batch_sampler.batch_size == 4
        assert len(new) == len(loader) == 5  # 22 images, batches of 4, the last 2 dropped
    assert loader.num_workers == 0  # the original is not modified


@pytest.mark.parametrize("workers", [0, 1])
def test_with_num_workers_yields_the_same_batches_for_the_same_seed(workers):
    g = torch.Generator()
    loader = DataLoader(_dataset(), batch_size=4, shuffle=True, drop_last=True, collate_fn=_collate, generator=g)
    expected = _batches(loader, g)
    _same(_batches(with_num_workers(loader, workers), g), expected)
    assert not torch.equal(expected[0]["ids"], _batches(loader, g, seed=1)[0]["ids"])  # the seed matters
    ids = torch.cat([b["ids"] for b in expected]).tolist()
    assert len(ids) == 20 and ids != sorted(ids)  # shuffled, the last incomplete batch dropped


@pytest.mark.parametrize("workers", [0, 1])
def test_loaders_without_a_batch_sampler_or_with_a_custom_one(workers):
    data = _dataset(6)
    unbatched = DataLoader(data, batch_size=None)
    rebuilt = with_num_workers(unbatched, workers)
    assert rebuilt.batch_sampler is None and rebuilt.sampler is unbatched.sampler
    for (x, i), (y, j) in zip(unbatched, rebuilt, strict=True):
        assert torch.equal(x, y) and i == j
    sampler = BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False)
    custom = DataLoader(data, batch_sampler=sampler)
    rebuilt = with_num_workers(custom, workers)
    assert rebuilt.batch_sampler is sampler
    assert [b[1].tolist() for b in rebuilt] == [[0, 1], [2, 3], [4]]


def test_persistent_workers_and_prefetch_factor_are_kept_where_workers_allow_them():
    loader = DataLoader(_dataset(), batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=3)
    one = with_num_workers(loader, 1)
    assert one.persistent_workers is True and one.prefetch_factor == 3
    zero = with_num_workers(loader, 0)  # DataLoader rejects both without workers
    assert zero.persistent_workers is False and zero.prefetch_factor is None
    assert with_num_workers(DataLoader(_dataset(), batch_size=4), 2).prefetch_factor == 2
    # From a loader without workers: persistent ones, as suggest_loader_kwargs() and the report recommend.
    assert with_num_workers(DataLoader(_dataset(), batch_size=4), 1).persistent_workers is True
    kept = DataLoader(_dataset(), batch_size=4, num_workers=2, persistent_workers=False)
    assert with_num_workers(kept, 1).persistent_workers is False  # the user's explicit choice stays


def test_with_num_workers_refuses_an_iterable_dataset_and_other_iterables():
    with pytest.raises(TypeError, match="IterableDataset"):
        with_num_workers(DataLoader(Stream(), batch_size=2), 1)
    with pytest.raises(TypeError, match="list, not a torch DataLoader"):
        with_num_workers([torch.zeros(2)], 1)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_with_num_workers_refuses_what_is_not_a_worker_count(bad):
    with pytest.raises(ValueError, match="expected an integer >= 0"):
        with_num_workers(DataLoader(_dataset(), batch_size=4), bad)


def test_can_rebuild_says_why_not():
    assert can_rebuild(DataLoader(_dataset(), batch_size=4)) is None
    assert can_rebuild(DataLoader(_dataset(), batch_size=None)) is None
    why = can_rebuild(DataLoader(Stream(), batch_size=2))
    assert "IterableDataset" in why and "get_worker_info()" in why
    assert can_rebuild([1, 2]) == "the training data is a list, not a torch DataLoader"
    assert can_rebuild(None) == "the training data is a NoneType, not a torch DataLoader"
    assert can_rebuild(iter([1])) == "the training data is a list_iterator, not a torch DataLoader"
