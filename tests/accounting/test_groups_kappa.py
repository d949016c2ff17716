"""ranked_kappa: κ_g by budget rank (ampfl's reading of 001's κ rule), strictest group sparsest."""

from __future__ import annotations

import pytest

from ampfl.accounting.groups import RANKED_LEVELS, ranked_kappa


def test_levels_follow_the_budget_rank() -> None:
    assert ranked_kappa([1.0, 2.0, 4.0]) == list(RANKED_LEVELS)
    assert ranked_kappa([4.0, 1.0, 2.0]) == [0.75, 0.25, 0.5]
    assert ranked_kappa([2.0, 2.0, 8.0]) == [0.25, 0.25, 0.5]  # equal budgets share a level
    assert ranked_kappa([3.0], levels=[0.4]) == [0.4]


@pytest.mark.parametrize(
    ("budgets", "levels"),
    [([], RANKED_LEVELS), ([1.0, -1.0], RANKED_LEVELS), ([1.0, 2.0], [0.5, 0.2]), ([1.0, 2.0], [0.5])],
)
def test_bad_inputs_are_refused(budgets: list[float], levels: list[float]) -> None:
    with pytest.raises(ValueError):
        ranked_kappa(budgets, levels)
