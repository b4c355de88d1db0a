"""Staleness weight functions and their specs."""

from __future__ import annotations

import pytest

from fedort.coordinator.fedbuff.staleness import parse_staleness_weight
from fedort.common.errors import ConfigError


@pytest.mark.parametrize("spec, staleness, weight", [
    ("constant", 0, 1.0), ("constant", 50, 1.0),
    ("poly:0.5", 0, 1.0), ("poly:0.5", 3, 0.5), ("poly:1", 4, 0.2), ("poly:0", 9, 1.0),
    ("hinge:1,2", 0, 1.0), ("hinge:1,2", 2, 1.0), ("hinge:1,2", 4, 1 / 3), ("hinge:0.5,0", 2, 0.5),
])
def test_weights_follow_their_formula(spec, staleness, weight):
    assert parse_staleness_weight(spec)(staleness) == pytest.approx(weight, rel=1e-12)


@pytest.mark.parametrize("spec", ["constant", "poly:0.5", "poly:2", "hinge:0.3,4", "hinge:10,0"])
def test_weights_are_in_0_1_and_never_grow_with_staleness(spec):
    w = parse_staleness_weight(spec)
    values = [w(s) for s in range(200)]
    assert all(0 < v <= 1 for v in values) and values[0] == 1.0
    assert all(a >= b for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("spec, canonical", [("constant", "constant"), (" Poly:0.5 ", "poly:0.5"),
                                             ("hinge:1, 2", "hinge:1.0,2.0")])
def test_str_is_a_canonical_spec(spec, canonical):
    assert str(parse_staleness_weight(spec)) == canonical
    assert str(parse_staleness_weight(canonical)) == canonical


@pytest.mark.parametrize("spec, message", [
    ("linear", "unknown staleness weight 'linear'"),
    ("poly", "takes 1 parameter(s): expected 'poly:A'"),
    ("hinge:1", "takes 2 parameter(s): expected 'hinge:A,B'"),
    ("constant:1", "takes 0 parameter(s)"),
    ("poly:x", "A must be a number, got 'x'"),
    ("poly:-1", "A must be >= 0"),
    ("poly:nan", "A must be finite"),
    ("hinge:0,1", "A must be > 0"),
    ("hinge:1,-1", "B must be >= 0"),
])
def test_bad_specs_say_what_was_expected(spec, message):
    with pytest.raises(ConfigError) as err:
        parse_staleness_weight(spec)
    assert message in str(err.value)
