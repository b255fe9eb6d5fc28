"""ot_repair's shared fits (mass.methods.ot_repair.reuse): inside ``shared_fits`` calibration's
cell candidates reuse each pass's predictor and transport, and the fits are bit for bit the
fits without it."""

from __future__ import annotations

import torch

from mass.methods import get_method
from mass.methods.ot_repair import reuse
from tests.mass.methods.test_ot_repair import xor_case

# calibration's cell candidates' shapes (mass.calibrate.space), small
CERTIFIED = {"cell_value": "source", "cell_rows": 10, "cell_axes": 2, "cells_by_preserved": True,
             "cell_edges": "common", "cell_basis": "within_s", "passes": 1, "cell_count": 12,
             "steps": 6, "predictor_epochs": 3}  # fmt: skip
KMEANS = {"cell_rows": 10, "cells_by_preserved": True, "cell_value": "source", "steps": 6,
          "predictor_epochs": 3}  # fmt: skip
TWO_PASSES = {**CERTIFIED, "cell_axes": 1, "passes": 2, "cell_count": 0}
BALANCED = {**CERTIFIED, "passes": 2, "cell_count": 0, "cell_balance": 0.3}


def _fits(tr, configs: list[dict]) -> list[tuple[dict, bytes]]:
    """Each config's fitted state and torch's global generator's state after it."""
    out = []
    for params in configs:
        fit = get_method("ot_repair").fit(tr, suppress=["s"], preserve=["u"], params=params,
                                          seed=0, progress=False)  # fmt: skip
        state = {k: v.clone() for k, v in fit.modifier.state_dict().items()}
        out.append((state, torch.get_rng_state().numpy().tobytes()))
        torch.rand(5)  # the judging between two fits draws from the global generator too
    return out


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_shared_fits_are_the_fits_without_sharing_bit_for_bit_and_reuse_passes():
    torch.set_num_threads(1)
    tr, _ = xor_case(n=1200)
    configs = [CERTIFIED, KMEANS, TWO_PASSES, CERTIFIED, BALANCED]
    torch.manual_seed(123)
    alone = _fits(tr, configs)
    assert reuse._cache is None  # nothing kept outside shared_fits
    before = dict(reuse.stats)
    torch.manual_seed(123)
    with reuse.shared_fits():
        shared = _fits(tr, configs)
    assert reuse._cache is None  # dropped on leaving
    for (sa, ra), (sb, rb), params in zip(alone, shared, configs, strict=True):
        assert _same(sa, sb), params
        assert ra == rb, params  # the global generator left where the fit leaves it
    hits = reuse.stats["hits"] - before["hits"]
    misses = reuse.stats["misses"] - before["misses"]
    # pass 0 is fitted once for the first four (the k-means cells, the two-pass partition and
    # the repeated certified partition reuse it), the two-pass partition's second pass once;
    # the balanced candidate fits on fewer rows (its held-out share), so its passes are its own
    assert misses >= 4 and hits >= 4, (hits, misses)


def test_a_fit_with_other_transport_knobs_or_rows_is_not_reused():
    torch.set_num_threads(1)
    tr, te = xor_case(n=1200)
    with reuse.shared_fits():
        before = dict(reuse.stats)
        _fits(tr, [CERTIFIED, {**CERTIFIED, "knots": 17}])
        _fits(te, [CERTIFIED])
        assert reuse.stats["hits"] == before["hits"]


def test_passes_larger_than_the_byte_bound_are_not_kept():
    torch.set_num_threads(1)
    tr, _ = xor_case(n=1200)
    alone = _fits(tr, [KMEANS])
    with reuse.shared_fits(max_bytes=1000):  # less than one pass's transported rows
        before = dict(reuse.stats)
        kept = _fits(tr, [CERTIFIED, KMEANS])
        assert reuse.stats["hits"] == before["hits"]
        assert not reuse._cache
    assert _same(alone[0][0], kept[1][0])


def test_a_one_pass_chain_reuses_the_first_step_of_a_two_pass_chain_bit_for_bit():
    """The served rows of the fit rows (what source-valued cells average) are kept per prefix
    of the chain: a one-pass candidate after a two-pass one on the same rows serves nothing
    again (calibration's lookups at the release's shape fit them in this order)."""
    torch.set_num_threads(1)
    tr, _ = xor_case(n=1200)
    configs = [TWO_PASSES, CERTIFIED]
    torch.manual_seed(7)
    alone = _fits(tr, configs)
    torch.manual_seed(7)
    with reuse.shared_fits():
        served_calls = []
        real = reuse._put

        def put(key, value):
            if key[0] == "served":
                served_calls.append(len(key) - 1)
            real(key, value)

        reuse._put = put
        try:
            shared = _fits(tr, configs)
        finally:
            reuse._put = real
        kept = [k for k in reuse._cache if k[0] == "served"]
    for (sa, ra), (sb, rb), params in zip(alone, shared, configs, strict=True):
        assert _same(sa, sb), params
        assert ra == rb, params
    # the two-pass fit served its rows once through each pass; the one-pass fit served none
    assert served_calls == [1, 2] and len(kept) == 2
