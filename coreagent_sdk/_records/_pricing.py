"""Cost from tokens: a `Price` per model and a `PriceTable` the user gives.

The daemon reports what a turn cost (`usage-update`'s `cost_usd_total`), but a
scripted or simulated model has no bill, and a study often wants to ask "what
would this fleet cost on model X?". So cost is computed here from token counts
and a table of prices the user writes down, never from prices we ship: vendor
prices change, and a stale number presented as fact is worse than none.

Prices are US dollars per million tokens, the unit vendors publish, so a table
can be copied from a price page without arithmetic. Every value is checked when
the table is built (finite, not negative), and a model missing from a table
without a default is an error that names the model and the fix, never a
silent zero that makes a fleet look free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from .._attach._quote import names_text, quote_name

__all__ = ["Price", "PriceTable"]

_PER = 1_000_000


def _price_value(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(
            "Price: a price must be a finite number of US dollars per million tokens, "
            f"0 or more; got {value!r}"
        )
    return float(value)


def _tokens(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"Price.cost: {name} must be a whole number of tokens, 0 or more; got {value!r}"
        )
    return value


@attrs.frozen
class Price:
    """What one model's tokens cost, in US dollars per million tokens.

    Attributes:
        input_per_mtok: Dollars per million input (prompt) tokens.
        output_per_mtok: Dollars per million output (completion) tokens.
    """

    input_per_mtok: float = attrs.field(converter=_price_value)
    output_per_mtok: float = attrs.field(converter=_price_value)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The dollars `input_tokens` in and `output_tokens` out cost at this price."""
        i = _tokens("input_tokens", input_tokens)
        o = _tokens("output_tokens", output_tokens)
        return (i * self.input_per_mtok + o * self.output_per_mtok) / _PER


def _prices(value: Mapping[str, Price]) -> Mapping[str, Price]:
    if not isinstance(value, Mapping):
        raise TypeError(f"PriceTable: prices must map model names to Price; got {value!r}")
    checked: dict[str, Price] = {}
    for model, price in value.items():
        if not isinstance(model, str) or not model:
            raise ValueError(f"PriceTable: a model name must be a non-empty string; got {model!r}")
        if not isinstance(price, Price):
            raise TypeError(
                f"PriceTable: the price of {quote_name(model)} must be a Price(input_per_mtok, "
                f"output_per_mtok); got {price!r}"
            )
        checked[model] = price
    return MappingProxyType(checked)


def _default(value: Price | None) -> Price | None:
    if value is not None and not isinstance(value, Price):
        raise TypeError(f"PriceTable: default must be a Price or None; got {value!r}")
    return value


@attrs.frozen
class PriceTable:
    """Prices by model name, and what a model's tokens cost.

    ```python
    prices = PriceTable({"gpt-x": Price(2.5, 10.0), "scripted": Price(0, 0)})
    prices.cost("gpt-x", input_tokens=1200, output_tokens=300)   # 0.006
    ```

    Attributes:
        prices: Model name -> its `Price` (read-only).
        default: The price of a model the table does not name; None (the default)
            makes an unnamed model an error, so nothing is silently free.
    """

    prices: Mapping[str, Price] = attrs.field(converter=_prices)
    default: Price | None = attrs.field(default=None, converter=_default)

    def price_of(self, model: str) -> Price:
        """The price of `model`: its own, else the default; a `KeyError` naming the fix."""
        price = self.prices.get(model)
        if price is not None:
            return price
        if self.default is not None:
            return self.default
        raise KeyError(
            f"PriceTable: no price for model {quote_name(model)} "
            f"(priced: {names_text(sorted(self.prices)) or 'none'}); add it to the table "
            "or give PriceTable(..., default=Price(...))"
        )

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        """The dollars `model`'s `input_tokens` and `output_tokens` cost."""
        return self.price_of(model).cost(input_tokens, output_tokens)

    def __contains__(self, model: object) -> bool:
        return model in self.prices
