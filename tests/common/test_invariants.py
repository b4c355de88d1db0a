"""`present`: a value the caller's state guarantees, or an INTERNAL error that names what was missing."""

import pytest

from fedort.common.errors import FedortError
from fedort.common.invariants import present


def test_present_returns_a_set_value_itself():
    value = object()
    assert present(value, "the open round") is value


def test_present_keeps_falsy_values_that_are_not_none():
    assert present(0, "a count") == 0
    assert present("", "a name") == ""


def test_present_names_the_missing_value_in_an_internal_error():
    with pytest.raises(FedortError, match="the open round is not set") as info:
        present(None, "the open round")
    assert info.value.code == "INTERNAL"
