"""coordinator/privacy/secagg/exclusion.py: who sits out the next attempt, and the run's later rounds."""

from __future__ import annotations

from secagg_support import make_params

from fedort.common.secagg.messages import UnmaskResponse
from fedort.common.secagg.scheme import AES_PRIME_W32, COMMITTED
from fedort.coordinator.privacy.secagg.exclusion import Exclusions
from fedort.coordinator.privacy.secagg.server_state import SecAggServerState


def _state(cheaters=None, complaints=None, scheme=COMMITTED):
    state = SecAggServerState(make_params(6, 10, scheme=scheme))
    state.cheaters = dict(cheaters or {})
    state.responses = {c: UnmaskResponse(c, {}, {}, {}, tuple(named)) for c, named in (complaints or {}).items()}
    return state


def test_a_caught_cheater_sits_out_every_later_round_even_after_a_restart(tmp_path):
    path = tmp_path / "excluded.json"
    assert Exclusions(path).learn(1, _state(cheaters={"c001": "foreign index"})) == ["c001"]
    again = Exclusions(path)  # a restarted coordinator
    assert again.excluded(1) == again.excluded(7) == {"c001"}


def test_the_accused_sit_out_only_the_rounds_later_attempts(tmp_path):
    ex = Exclusions(tmp_path / "excluded.json")
    assert ex.learn(3, _state(complaints={"c002": ["c005"], "c003": ["c005"]})) == ["c005"]
    assert ex.excluded(3) == {"c005"} and ex.excluded(4) == frozenset()
    assert not (tmp_path / "excluded.json").exists()  # an accusation is no proof: nothing kept for the run


def test_an_accuser_accuses_one_neighbour_an_attempt_and_a_caught_one_nobody(tmp_path):
    ex = Exclusions(tmp_path / "excluded.json")
    state = _state(cheaters={"c001": "bad share"}, complaints={"c001": ["c002"], "c003": ["c005", "c004"]})
    assert ex.learn(1, state) == ["c001", "c004"]
    assert ex.excluded(1) == {"c001", "c004"}


def test_before_commitments_a_caught_responder_sits_out_only_the_rounds_later_attempts(tmp_path):
    ex = Exclusions(tmp_path / "excluded.json")  # its dealer may have handed it the wrong index or share
    assert ex.learn(2, _state(cheaters={"c001": "foreign index"}, scheme=AES_PRIME_W32)) == ["c001"]
    assert ex.excluded(2) == {"c001"} and ex.excluded(3) == frozenset()
