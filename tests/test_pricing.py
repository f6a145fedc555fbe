"""Price and PriceTable: cost from token counts and a table the user gives."""

from __future__ import annotations

import math

import attrs
import pytest

from coreagent_sdk import Price, PriceTable


def test_a_price_costs_dollars_per_million_tokens_in_and_out() -> None:
    price = Price(input_per_mtok=2.5, output_per_mtok=10.0)
    # 1200 in at $2.5/M = 0.003; 300 out at $10/M = 0.003
    assert price.cost(1200, 300) == pytest.approx(0.006)
    assert price.cost(0, 0) == 0.0
    assert Price(0, 0).cost(10**9, 10**9) == 0.0


def test_a_table_prices_each_model_by_its_own_price() -> None:
    table = PriceTable({"big": Price(3, 15), "small": Price(0.25, 1.25)})
    assert table.cost("big", input_tokens=1_000_000, output_tokens=0) == pytest.approx(3.0)
    assert table.cost("small", input_tokens=0, output_tokens=2_000_000) == pytest.approx(2.5)
    assert "big" in table and "other" not in table


def test_an_unpriced_model_is_an_error_naming_the_model_the_priced_ones_and_the_fix() -> None:
    table = PriceTable({"b": Price(1, 1), "a": Price(1, 1)})
    with pytest.raises(KeyError) as caught:
        table.cost("gpt-z", 10, 10)
    message = str(caught.value)
    assert '"gpt-z"' in message
    assert '"a", "b"' in message
    assert "default=Price" in message


def test_a_default_prices_every_model_the_table_does_not_name() -> None:
    table = PriceTable({"big": Price(3, 15)}, default=Price(1, 2))
    assert table.cost("anything", 1_000_000, 1_000_000) == pytest.approx(3.0)
    assert table.cost("big", 1_000_000, 0) == pytest.approx(3.0)


@pytest.mark.parametrize("bad", [-0.01, math.nan, math.inf, "1", True, None])
def test_a_price_that_is_not_a_finite_non_negative_number_is_refused(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)) as caught:
        Price(bad, 1.0)  # type: ignore[arg-type]
    assert "Price" in str(caught.value)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_token_counts_must_be_whole_and_not_negative(bad: object) -> None:
    with pytest.raises(ValueError, match=r"Price\.cost: input_tokens"):
        Price(1, 1).cost(bad, 0)  # type: ignore[arg-type]


def test_a_table_refuses_a_value_that_is_not_a_price_naming_the_model() -> None:
    with pytest.raises(TypeError, match='"m"'):
        PriceTable({"m": (1.0, 2.0)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="model name"):
        PriceTable({"": Price(1, 1)})


def test_a_table_is_frozen_and_does_not_follow_the_dict_it_was_given() -> None:
    given = {"m": Price(1, 1)}
    table = PriceTable(given)
    given["m"] = Price(100, 100)
    assert table.cost("m", 1_000_000, 0) == pytest.approx(1.0)
    with pytest.raises(TypeError):
        table.prices["m"] = Price(5, 5)  # type: ignore[index]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        table.default = Price(1, 1)  # type: ignore[misc]
