"""The demo frontier's savings (ampfl.fl.demo.frontier): pure functions on synthetic curves, known answers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.fl.demo.frontier import (
    check_epsilons,
    epsilon_at_accuracy,
    epsilon_saved_at_equal_accuracy,
    noise_saved_at_equal_epsilon,
    savings,
)

GRID = (1.0, 2.0, 4.0, 8.0, 16.0)


def test_epsilon_at_accuracy_interpolates_in_log_epsilon():
    # Halfway in accuracy between ε = 1 and ε = 16 is halfway in log ε: sqrt(16) = 4.
    assert epsilon_at_accuracy([1.0, 16.0], [0.5, 0.9], 0.7) == pytest.approx(4.0, rel=1e-12)
    # A quarter of the way: 16^0.25 = 2.
    assert epsilon_at_accuracy([1.0, 16.0], [0.5, 0.9], 0.6) == pytest.approx(2.0, rel=1e-12)
    # A grid point's own accuracy gives that grid point exactly.
    assert epsilon_at_accuracy(GRID, [0.5, 0.6, 0.7, 0.8, 0.9], 0.8) == 8.0


def test_epsilon_at_accuracy_takes_the_first_crossing_of_a_non_monotone_curve():
    # Prepare: rises to 0.6 at ε = 2, falls to 0.4 at ε = 4, rises to 0.8 at ε = 8.
    grid, curve = [1.0, 2.0, 4.0, 8.0], [0.2, 0.6, 0.4, 0.8]
    # 0.5 is 3/4 of the way from 0.2 to 0.6: ε = 2^0.75, on the first segment (not the third).
    assert epsilon_at_accuracy(grid, curve, 0.5) == pytest.approx(2**0.75, rel=1e-12)
    # 0.7 is first reached on the last segment, 3/4 of the way from 0.4 to 0.8: ε = 4 · 2^0.75.
    assert epsilon_at_accuracy(grid, curve, 0.7) == pytest.approx(4 * 2**0.75, rel=1e-12)


@pytest.mark.parametrize(
    ("accuracy", "why"),
    [
        (0.95, "never reached on the grid"),
        (0.5, "reached at the first point"),
        (0.3, "below the first point"),
    ],
)
def test_epsilon_at_accuracy_is_none_outside_the_curve(accuracy, why):
    assert epsilon_at_accuracy(GRID, [0.5, 0.6, 0.7, 0.8, 0.9], accuracy) is None, why


def test_epsilon_saved_on_a_pair_of_curves_shifted_by_a_known_factor():
    # Prepare: the no-amplification curve is the amplified one moved right by a factor 4 in ε
    # (unamplified(ε) = amplified(ε / 4)), both linear in log2 ε: amplified = 0.5 + 0.1 log2 ε.
    amplified = [0.5 + 0.1 * math.log2(e) for e in GRID]
    unamplified = [0.5 + 0.1 * (math.log2(e) - 2) for e in GRID]
    # Execute
    rows = epsilon_saved_at_equal_accuracy(GRID, amplified, unamplified)
    # Assert: ratio 4 wherever both curves have the accuracy inside the grid; None where the amplified curve
    # already has it at ε = 1 (accuracies 0.3, 0.4 and 0.5: the crossing lies at or below the grid).
    assert [r["epsilon"] for r in rows] == list(GRID)
    assert [r["accuracy"] for r in rows] == unamplified
    assert [r["ratio"] for r in rows[:3]] == [None, None, None]
    assert rows[0]["epsilon_no_amplification"] is None  # a curve's own first point is censored too
    for row, e_amp in zip(rows[3:], [2.0, 4.0], strict=True):
        assert row["epsilon_no_amplification"] == pytest.approx(row["epsilon"], rel=1e-12)
        assert row["epsilon_amplified"] == pytest.approx(e_amp, rel=1e-12)
        assert row["ratio"] == pytest.approx(4.0, rel=1e-12)


def test_epsilon_saved_is_none_where_the_curves_do_not_overlap():
    # The amplified curve stays below everything the no-amplification one reaches after its first point.
    rows = epsilon_saved_at_equal_accuracy(GRID, [0.1] * 5, [0.2, 0.3, 0.4, 0.5, 0.6])
    assert all(r["epsilon_amplified"] is None and r["ratio"] is None for r in rows)


def test_epsilon_saved_reads_a_plateau_at_its_first_crossing():
    # The no-amplification curve reaches 0.6 at ε = 2 and stays there: at ε = 4 and 8 its ε for 0.6 is 2,
    # so a flat stretch does not inflate the saving. The amplified curve reaches 0.6 at ε = 2^0.5.
    rows = epsilon_saved_at_equal_accuracy([1.0, 2.0, 4.0, 8.0], [0.4, 0.8, 0.8, 0.8], [0.3, 0.6, 0.6, 0.6])
    for row in rows[1:]:
        assert row["epsilon_no_amplification"] == 2.0
        assert row["epsilon_amplified"] == pytest.approx(2**0.5, rel=1e-12)
        assert row["ratio"] == pytest.approx(2**0.5, rel=1e-12)


def test_noise_saved_is_the_ratio_of_noise_multipliers():
    rows = noise_saved_at_equal_epsilon([1.0, 2.0], [2.0, 1.0], [5.0, 1.5])
    assert rows == [
        {
            "epsilon": 1.0,
            "noise_multiplier_amplified": 2.0,
            "noise_multiplier_no_amplification": 5.0,
            "ratio": 2.5,
        },
        {
            "epsilon": 2.0,
            "noise_multiplier_amplified": 1.0,
            "noise_multiplier_no_amplification": 1.5,
            "ratio": 1.5,
        },
    ]


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(st.floats(0.01, 0.2), min_size=2, max_size=8),
    start=st.floats(0.0, 0.5),
    fraction=st.floats(0.0, 1.0),
    data=st.data(),
)
def test_epsilon_at_accuracy_inverts_a_rising_curve(steps, start, fraction, data):
    # Prepare: a strictly rising curve on a doubling grid and a target between two of its points.
    grid = [2.0**i for i in range(len(steps) + 1)]
    curve = [start + sum(steps[:i]) for i in range(len(steps) + 1)]
    j = data.draw(st.integers(1, len(steps)))
    target = min(curve[j - 1] + fraction * (curve[j] - curve[j - 1]), curve[j])  # no overshoot by round-off
    # Execute
    epsilon = epsilon_at_accuracy(grid, curve, target)
    # Assert: None only at the first point; otherwise on segment j, and the curve interpolated there (linear
    # in log2 ε, computed independently) gives the target back.
    if target <= curve[0]:
        assert epsilon is None
        return
    assert epsilon is not None and grid[j - 1] * (1 - 1e-12) <= epsilon <= grid[j] * (1 + 1e-12)
    back = curve[j - 1] + (math.log2(epsilon) - (j - 1)) * (curve[j] - curve[j - 1])
    assert back == pytest.approx(target, abs=1e-9)
    if target == curve[j]:
        assert epsilon == grid[j]


def test_savings_per_algorithm_needs_both_accountings_on_one_grid():
    # Prepare: algorithm "a" has both curves, "b" only the amplified one.
    def point(algorithm, accounting, epsilon, z, accuracy):
        return {
            "algorithm": algorithm,
            "accounting": accounting,
            "epsilon": epsilon,
            "noise_multiplier": z,
            "final_accuracy": accuracy,
            "local_accuracy": None,
        }

    frontier = [
        point("a", "no-amplification", 2.0, 3.0, 0.6),
        point("a", "amplified", 2.0, 1.0, 0.8),
        point("a", "amplified", 1.0, 2.0, 0.4),
        point("a", "no-amplification", 1.0, 8.0, 0.2),
        point("b", "amplified", 1.0, 1.0, 0.5),
    ]
    # Execute
    result = savings(frontier)
    # Assert: points sorted by ε; z ratios 4 and 3; accuracy 0.6 is reached by the amplified curve at
    # ε = 2^0.5 (halfway from 0.4 to 0.8), the no-amplification curve at ε = 2.
    assert list(result) == ["a"]
    noise = result["a"]["noise_saved_at_equal_epsilon"]
    assert [(r["epsilon"], r["ratio"]) for r in noise] == [(1.0, 4.0), (2.0, 3.0)]
    gap = result["a"]["epsilon_saved_at_equal_accuracy"][1]
    assert gap["epsilon_amplified"] == pytest.approx(2**0.5) and gap["ratio"] == pytest.approx(2**0.5)


@pytest.mark.parametrize(
    ("epsilons", "needle"),
    [
        ([], "finite numbers > 0"),
        ([0.0, 1.0], "finite numbers > 0"),
        ([1.0, math.inf], "finite"),
        ([2.0, 1.0], "increasing"),
        ([1.0, 1.0], "increasing"),
    ],
)
def test_bad_grids_are_refused_naming_epsilons(epsilons, needle):
    with pytest.raises(ValueError, match="epsilons") as error:
        check_epsilons(epsilons)
    assert needle in str(error.value)


def test_accuracies_must_match_the_grid():
    with pytest.raises(ValueError, match="accuracies must have one value per epsilon"):
        epsilon_at_accuracy([1.0, 2.0], [0.5], 0.4)
