"""Validation helpers at the accounting boundary (ampfl.accounting._checks)."""

import math

import pytest

from ampfl.accounting._checks import check_delta, check_int, check_orders, check_positive, check_probability


@pytest.mark.parametrize("orders", [None, 5, "2,3", [], [1, 2], [2.5]], ids=repr)
def test_check_orders_rejects_with_value_error(orders):
    with pytest.raises(ValueError, match="orders"):
        check_orders("orders", orders)


def test_check_orders_sorts_and_deduplicates():
    assert check_orders("orders", [8, 2, 2, 4.0]).tolist() == [2, 4, 8]


@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (check_probability, 0.0, r"p must be in \(0, 1\]. Found 0.0."),
        (check_probability, math.nan, "p must be a real number"),
        (check_delta, 1.0, r"p must be in \(0, 1\). Found 1.0."),
        (check_positive, math.inf, r"p must be in \(0, inf\). Found inf."),
        (check_positive, True, "p must be a real number"),
        (check_int, 2.5, "p must be an integer"),
    ],
)
def test_messages_name_parameter_range_and_value(check, value, message):
    with pytest.raises(ValueError, match=message):
        check("p", value)
