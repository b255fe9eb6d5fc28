"""mass.minibatch: one permutation per call, cut into batches of at least two rows."""

from __future__ import annotations

import torch

from mass.minibatch import batches


def test_batches_cover_a_fresh_permutation_and_drop_a_one_row_tail():
    gen = torch.Generator().manual_seed(3)
    got = batches(129, 64, gen)
    assert [len(b) for b in got] == [64, 64]  # the 129th row's batch of one is dropped
    expect = torch.randperm(129, generator=torch.Generator().manual_seed(3))
    assert torch.equal(torch.cat(got), expect[:128])


def test_batches_draw_exactly_one_permutation_from_the_generator():
    """What follows a call (the branch judges draw augmentations from the same generator)
    sees the generator as one ``randperm`` left it: trainings stay reproducible."""
    a, b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    batches(100, 32, a)
    torch.randperm(100, generator=b)
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))


def test_a_single_row_is_its_own_batch_rather_than_none():
    assert [b.tolist() for b in batches(1, 8, torch.Generator().manual_seed(0))] == [[0]]
