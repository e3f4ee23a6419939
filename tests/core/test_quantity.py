from fractions import Fraction

import pytest

from gridroute.core.quantity import QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("1.5", Fraction(3, 2)),
        ("500m", Fraction(1, 2)),
        ("2k", Fraction(2000)),
        ("1Ki", Fraction(1024)),
        ("1e2", Fraction(100)),
        (2, Fraction(2)),
        (0.25, Fraction(1, 4)),
        ("-1", Fraction(-1)),
    ],
)
def test_parse(text, value) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5x", "1 k", True])
def test_refused(text) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_format_round_trips() -> None:
    for v in [Fraction(1), Fraction(3, 2), Fraction(1, 2), Fraction(1, 3)]:
        assert abs(parse_quantity(format_quantity(v)) - v) < Fraction(1, 10**5)
