"""SecAgg/SecAgg+ end to end in-process: exact sums, dropouts, aborts, restore, no leakage."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from fedort.coordinator.privacy.secagg.server import SecAggServer
from fedort.edge_client.secagg.client import SecAggClient
from fedort.common.secagg.phases import Phase
from fedort.common.secagg import SecAggAborted, SecAggError, UnmaskRequest
from fedort.common.secagg.messages import ShareDelivery
from fedort.common.secagg.scheme import SUPPORTED
from secagg_support import make_params, quantized_sum, run_round, through_share_keys


def _updates(params, seed=0):
    rng = np.random.default_rng(seed)
    return {c: rng.normal(0.0, 0.3, params.length) for c in params.cohort}


def test_masked_sum_equals_the_plain_quantized_sum_exactly():
    params = make_params(10, 1000)
    updates = _updates(params)
    result = run_round(params, updates)
    expected = quantized_sum(params, updates, params.cohort)
    assert np.array_equal(params.fixed_point.to_signed(expected)[:-1], np.rint(result.weighted_sum * params.fixed_point.scale))
    assert result.weight_sum == 10.0


@pytest.mark.slow
def test_30_percent_dropping_after_upload_decodes_to_the_survivors_sum():
    params = make_params(20, 1000)
    updates = _updates(params, 1)
    dropped = params.cohort[::3][:6]
    result = run_round(params, updates, drop_before_upload=dropped)
    survivors = [c for c in params.cohort if c not in dropped]
    weighted, weight = params.fixed_point.decode_sum(quantized_sum(params, updates, survivors))
    assert np.array_equal(result.weighted_sum, weighted) and result.weight_sum == weight == 14.0
    assert sorted(result.dropped) == sorted(dropped)


def test_clients_that_upload_then_vanish_in_unmasking_are_counted():
    params = make_params(12, 500)
    updates = _updates(params, 2)
    result = run_round(params, updates, drop_before_unmask=params.cohort[:3])
    weighted, _ = params.fixed_point.decode_sum(quantized_sum(params, updates, params.cohort))
    assert np.array_equal(result.weighted_sum, weighted) and result.weight_sum == 12.0


def test_clients_dropping_after_sharing_keys_are_excluded():
    params = make_params(10, 300)
    updates = _updates(params, 3)
    result = run_round(params, updates, drop_before_upload=params.cohort[:2])
    weighted, _ = params.fixed_point.decode_sum(quantized_sum(params, updates, params.cohort[2:]))
    assert np.array_equal(result.weighted_sum, weighted) and set(result.survivors) == set(params.cohort[2:])


def test_clients_dropping_before_sharing_keys_are_excluded():
    params = make_params(10, 300)
    updates = _updates(params, 4)
    result = run_round(params, updates, drop_before_keys=params.cohort[:1], drop_before_shares=params.cohort[1:3])
    weighted, _ = params.fixed_point.decode_sum(quantized_sum(params, updates, params.cohort[3:]))
    assert np.array_equal(result.weighted_sum, weighted) and result.dropped == ()


def test_fewer_than_threshold_survivors_abort_with_a_reason():
    params = make_params(10, 100)  # threshold 5 of 9 neighbours
    server = SecAggServer(params)
    with pytest.raises(SecAggAborted, match="clients left after masked input, the threshold is 5"):
        run_round(params, _updates(params), drop_before_upload=params.cohort[:6], server=server)
    assert server.phase is Phase.FAILED and "threshold" in server.state.reason


def test_too_few_unmask_responses_abort():
    params = make_params(8, 100)  # threshold 4
    with pytest.raises(SecAggAborted, match="unmasking"):
        run_round(params, _updates(params), drop_before_unmask=params.cohort[:5])


@pytest.mark.slow
def test_secagg_plus_with_a_sparse_graph_is_exact_under_dropouts():
    params = make_params(40, 400, degree=10)
    assert all(len(n) == 10 for n in params.neighbours.values())
    updates = _updates(params, 5)
    dropped = params.cohort[5:9]
    result = run_round(params, updates, drop_before_upload=dropped)
    weighted, _ = params.fixed_point.decode_sum(quantized_sum(params, updates, [c for c in params.cohort if c not in dropped]))
    assert np.array_equal(result.weighted_sum, weighted)


def test_a_server_restored_mid_protocol_finishes_with_the_same_result():
    params = make_params(8, 200)
    updates = _updates(params, 6)
    server, clients = through_share_keys(params)
    for c in params.cohort[:4]:
        server.receive_masked_input(c, clients[c].masked_input(server.delivery_for(c), updates[c]))
    state, acc = server.snapshot()
    del server
    server = SecAggServer.restore(state, acc)
    for c in params.cohort[4:7]:
        server.receive_masked_input(c, clients[c].masked_input(server.delivery_for(c), updates[c]))
    request = server.close_masked_input()
    for c in request.survivors:
        server.receive_unmask(clients[c].unmask(request))
    result = SecAggServer.load(SecAggServer.restore(*server.snapshot()).dump()).finish()
    weighted, _ = params.fixed_point.decode_sum(quantized_sum(params, updates, params.cohort[:7]))
    assert np.array_equal(result.weighted_sum, weighted)


def test_a_server_reloaded_after_every_message_gives_the_exact_sum():
    params = make_params(12, 300, degree=8)  # T = 5: any client keeps >= 5 of 8 neighbours
    updates = _updates(params, 8)
    dropped = params.cohort[2:4]
    result = run_round(params, updates, drop_before_upload=dropped, drop_before_unmask=params.cohort[5:6], reload=True)
    weighted, _ = params.fixed_point.decode_sum(quantized_sum(params, updates, [c for c in params.cohort if c not in dropped]))
    assert np.array_equal(result.weighted_sum, weighted)


def test_a_second_masked_input_from_one_client_is_not_counted_twice():
    params = make_params(4, 10)
    server, clients = through_share_keys(params)
    y = clients["c000"].masked_input(server.delivery_for("c000"), np.zeros(10))
    assert server.receive_masked_input("c000", y) is True
    before = server.accumulator.copy()
    assert server.receive_masked_input("c000", y) is False
    assert np.array_equal(server.accumulator, before) and server.state.u3 == ["c000"]


def test_a_client_never_reveals_both_shares_of_one_neighbour():
    params = make_params(5, 10)
    server, clients = through_share_keys(params)
    me = clients["c000"]
    me.masked_input(server.delivery_for("c000"), np.zeros(10))
    me.unmask(UnmaskRequest(("c001",), ("c000", "c002", "c003", "c004")))
    with pytest.raises(SecAggError, match="contradicts"):
        me.unmask(UnmaskRequest((), params.cohort))


def test_no_masked_vector_correlates_with_its_clients_update():
    params = make_params(10, 2000)
    updates = _updates(params, 7)
    server, clients = through_share_keys(params)
    for c in params.cohort:
        masked = clients[c].masked_input(server.delivery_for(c), updates[c])
        as_float = params.fixed_point.to_signed(masked)[:-1].astype(np.float64)
        assert abs(np.corrcoef(as_float, updates[c])[0, 1]) < 0.1


def test_a_tampered_share_bundle_is_refused_by_its_recipient():
    params = make_params(4, 10)
    server, clients = through_share_keys(params)
    delivery = server.delivery_for("c000")
    sender = next(iter(delivery.sealed))
    box = bytearray(delivery.sealed[sender])
    box[-1] ^= 1
    tampered = type(delivery)({**delivery.sealed, sender: bytes(box)})
    with pytest.raises(SecAggError, match="authentication"):
        clients["c000"].masked_input(tampered, np.zeros(10))


def test_a_bundle_rerouted_to_another_client_is_refused():
    params = make_params(4, 10)
    server, clients = through_share_keys(params)
    stolen = server.delivery_for("c001").sealed["c002"]
    forged = type(server.delivery_for("c000"))({**server.delivery_for("c000").sealed, "c002": stolen})
    with pytest.raises(SecAggError, match="authentication"):
        clients["c000"].masked_input(forged, np.zeros(10))


def test_a_message_in_the_wrong_phase_names_the_phase():
    params = make_params(4, 10)
    server = SecAggServer(params)
    with pytest.raises(SecAggError, match="expected phase masked_input, in advertise"):
        server.receive_masked_input("c000", np.zeros(11, dtype=np.uint64))


def test_a_masked_input_from_outside_the_cohort_is_refused():
    params = make_params(4, 10)
    server, _ = through_share_keys(params)
    with pytest.raises(SecAggError, match="not in this phase's set"):
        server.receive_masked_input("intruder", np.zeros(11, dtype=np.uint64))


@pytest.mark.slow
def test_the_device_side_never_imports_the_coordinator():
    import subprocess
    import sys

    code = ("import sys, fedort.edge_client.secagg.client, fedort.edge_client.uploads.local_dp; "
            "print(sorted(m for m in sys.modules if m.startswith('fedort.coordinator')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def _advertised(params):
    server = SecAggServer(params)
    keys = {c: SecAggClient(c, params).advertise() for c in params.cohort}
    return server, keys


def test_a_small_order_public_key_is_refused_before_any_neighbour_would_agree_on_it():
    params = make_params(4, 10)
    server, keys = _advertised(params)
    with pytest.raises(SecAggError, match="not a usable X25519 public key"):
        server.receive_keys(dataclasses.replace(keys["c000"], mask_public=bytes(32)))  # the identity point
    assert "c000" not in server.state.keys


def test_a_public_key_another_client_advertised_is_refused():
    params = make_params(4, 10)
    server, keys = _advertised(params)
    server.receive_keys(keys["c000"])
    with pytest.raises(SecAggError, match="already in use"):
        server.receive_keys(dataclasses.replace(keys["c001"], cipher_public=keys["c000"].mask_public))
    server.receive_keys(keys["c001"])  # its own keys are still welcome


def test_an_oversized_share_bundle_is_refused_so_no_delivery_grows_with_a_members_whim():
    params = make_params(4, 10)
    server = SecAggServer(params)
    clients = {c: SecAggClient(c, params) for c in params.cohort}
    for client in clients.values():
        server.receive_keys(client.advertise())
    server.close_advertise()
    msg = clients["c000"].share_keys(server.roster_for("c000"))
    holder = sorted(msg.sealed)[0]
    with pytest.raises(SecAggError, match="at most 1024 bytes"):
        server.receive_shares(dataclasses.replace(msg, sealed={**msg.sealed, holder: bytes(5000)}))
    server.receive_shares(msg)


@pytest.mark.parametrize("scheme", SUPPORTED)
def test_the_replies_built_from_encoded_parts_are_the_messages_own_bytes(scheme):
    """Rosters, share deliveries and unmask requests are sent from text encoded once per round: the same bytes
    (and so the same message) as each message's own JSON."""
    params = make_params(8, 10, degree=4, scheme=scheme)
    server, clients = through_share_keys(params, {"c003"})
    for c in params.cohort:
        roster = server.roster_for(c)
        assert roster.to_bytes() == json.dumps(roster.to_dict(), sort_keys=True, separators=(",", ":")).encode()
        if c != "c003":
            assert server.delivery_bytes(c) == server.delivery_for(c).to_bytes()
            assert ShareDelivery.from_bytes(server.delivery_bytes(c)) == server.delivery_for(c)


def test_the_unmask_request_follows_the_masked_inputs_that_arrive():
    params = make_params(4, 10)
    server, clients = through_share_keys(params)
    before = server.unmask_request()
    assert before.survivors == () and before.dropped == params.cohort
    server.receive_masked_input("c001", clients["c001"].masked_input(server.delivery_for("c001"), np.zeros(10)))
    after = server.unmask_request()
    assert after.survivors == ("c001",) and "c001" not in after.dropped
    assert after is server.unmask_request()                       # built once while nothing changes
    assert after.to_bytes() == json.dumps(after.to_dict(), sort_keys=True, separators=(",", ":")).encode()
