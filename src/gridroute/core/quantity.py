"""Kubernetes resource quantities ("1", "1.5", "500m", "2k", "1Ki") as exact fractions.

A capacity factor is a quantity (the seed: "a Kubernetes quantity; unset means 1").
Weights are reduced to a whole-number ratio, so factors stay exact `Fraction`s: 0.1 x 3
must be 3/10, not 0.30000000000000004.
"""

from __future__ import annotations

import re
from fractions import Fraction

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity; ints and floats are taken as their decimal text."""
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    raw = str(text).strip()
    match = _QUANTITY.match(raw)
    if match is None:
        raise QuantityError(f"not a quantity: {text!r}")
    value = Fraction(match["num"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return value * (1 << _BINARY[suffix])
    if suffix[:1] in ("e", "E"):
        return value * Fraction(10) ** int(suffix[1:])
    return value * Fraction(10) ** _DECIMAL[suffix]


def format_quantity(value: Fraction) -> str:
    """Short decimal text for a factor (`1`, `1.5`, `500m` when it has no shorter form)."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1 and abs(milli.numerator) < 1000 and milli.numerator % 10 != 0:
        return f"{milli.numerator}m"
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return text
