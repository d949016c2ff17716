"""The split credit sweep (002): sound analyses only; the credit at 002's operating point above ampfl's."""

from __future__ import annotations

import pytest

from ampfl.reproduce.dong_credit import DELTA, credit_rows


def test_the_credit_is_larger_at_the_papers_operating_point() -> None:
    from ampfl.accounting.partition.reports import account_split

    rows = credit_rows(epsilons=(8.0,), submodels=(3,))
    paper, medium = rows  # one row per regime
    assert {r["analysis"] for r in rows} == {"subsampled-split-pld"}
    assert 0.0 < medium["credit"] < paper["credit"]
    for row in rows:  # the split's calibrated noise is certified by the same analysis at the target
        report = account_split(
            noise_multiplier=row["noise_multiplier_split"],
            num_submodels=3,
            steps=row["steps"],
            delta=DELTA,
            accountant="pld",
            sampling_rate=row["sampling_rate"],
        )
        assert report["epsilon"] <= row["target_epsilon"] * (1 + 1e-9)
        assert report["epsilon"] == pytest.approx(row["target_epsilon"], rel=0.02)
