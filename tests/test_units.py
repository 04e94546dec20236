import pytest

from planner.units import parse_quantity


@pytest.mark.parametrize("text,dim,expected", [
    ("3.35 TB/s", "bytes/s", 3.35e12),
    ("400 Gb/s", "bytes/s", 50e9),          # bits: 400e9 / 8
    ("989.4 TFLOPS", "flop/s", 989.4e12),
    ("80 GB", "bytes", 80e9),               # decimal, as vendors quote
    ("64 GiB", "bytes", 64 * 2**30),
    ("5 us", "s", 5e-6),
    ("2 ms", "s", 2e-3),
    ("700 W", "W", 700.0),
    ("4.916 USD/h", "usd/h", 4.916),
    (0.75, "1", 0.75),
])
def test_parse(text, dim, expected):
    assert parse_quantity(text, dim) == pytest.approx(expected)


@pytest.mark.parametrize("text,dim", [("3.35 TB", "bytes/s"), ("fast", "bytes"), ("10 parsecs", "s")])
def test_bad_units_say_what_was_expected(text, dim):
    with pytest.raises(ValueError, match=dim.split("/")[0]):
        parse_quantity(text, dim)
