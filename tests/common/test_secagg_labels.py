"""Domain-separation labels are the bytes json.dumps writes: every side (and the TypeScript client) agrees."""

import enum
import json
import random

import pytest

from fedort.common.secagg.labels import label


def _ids(rng: random.Random) -> list[str]:
    alphabet = "abcXYZ019-_.é\"\\/\n\t\u2028😀"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(50)]


def test_a_label_of_strings_and_integers_is_what_json_dumps_writes():
    rng = random.Random(3)
    for s in _ids(rng):
        items = ["fedort-secagg", rng.randint(-(2**70), 2**70), s, s[::-1]]
        assert label(*items) == json.dumps(items).encode()


class _Kind(enum.IntEnum):
    SEED = 7


@pytest.mark.parametrize("item", [True, False, 1.5, None, _Kind.SEED])
def test_other_items_follow_json_dumps_too(item):
    assert label("x", item, 3) == json.dumps(["x", item, 3]).encode()
