"""End to end: a real coordinator serving its web port, two Python devices and two browser tabs (real headless
Chromium driven by edge_client/web/scripts/tabs.mjs) train three rounds of FedAvg together.

Every device has its own enrolled token. The coordinator keeps its spool, so each round's committed global vector
is checked against the example-weighted mean of the four updates it acknowledged, recomputed here.
"""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from test_edge_e2e import CLI, Procs, fedavg_matches, finish, query, wait_for
from web_client import WEB, chromium_or_skip, node_or_skip, web_build

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture
def procs(tmp_path):
    ps = Procs(tmp_path)
    yield ps
    ps.kill_all()


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """dev0.npz .. dev3.npz (digits, x float32 [N, 64] in [0, 1], labels int64) and test.npz."""
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("web-digits")
    d = load_digits()
    x, labels = (d.data / 16).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(1).permutation(len(labels))
    test, train = order[:300], order[300:]
    files = {"test": folder / "test.npz"}
    np.savez(files["test"], x=x[test], labels=labels[test])
    for i in range(4):
        rows = train[i::4][:250]
        files[i] = folder / f"dev{i}.npz"
        np.savez(files[i], x=x[rows], labels=labels[rows])
    return files


def enroll(state, name: str) -> str:
    out = subprocess.run([*CLI, "coordinator", "enroll", name, "--state-dir", str(state)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return out.strip()


def start_web_coordinator(procs: Procs, artifacts, state, dist, **flags) -> tuple[int, int]:
    """(gRPC port, web port) of a token-auth coordinator that also serves the page on its web port."""
    port_file = state.parent / "coordinator.port"
    args = [*CLI, "coordinator", "serve", "--artifacts", str(artifacts), "--state-dir", str(state),
            "--address", "127.0.0.1:0", "--port-file", str(port_file), "--keep-spool", "--insecure",
            "--web-address", "127.0.0.1:0", "--web-page", str(dist)]
    for k, v in flags.items():
        args += [f"--{k.replace('_', '-')}", *([str(v)] if v != "" else [])]   # "" : a flag without a value
    p = procs.start("coordinator", args)
    found = re.compile(r"web port serving .* on [\d.]+:(\d+)")
    match = wait_for(lambda: found.search(p.err_path.read_text() + p.out_path.read_text()) or p.poll() is not None,
                     60, "the coordinator's web port")
    assert p.poll() is None, p.err_path.read_text()
    wait_for(lambda: port_file.exists(), 30, "the coordinator's port file")
    return int(port_file.read_text()), int(match.group(1))


def run_tabs(node: str, web_port: int, tabs: list[tuple[str, str, str]], *extra: str, timeout: float = 240,
             ok: bool = True) -> dict:
    args = [node, str(WEB / "scripts" / "tabs.mjs"), "--url", f"http://127.0.0.1:{web_port}/",
            "--timeout-ms", str(int(timeout * 1000) - 10_000), *extra]
    for name, token, data in tabs:
        args += ["--tab", f"{name},{token},{data}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=WEB)
    assert (done.returncode == 0) == ok, f"tabs exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return {t["name"]: t for t in json.loads(done.stdout)["tabs"]}


def start_python_edge(procs: Procs, grpc_port: int, data, name: str, token: str, *extra: str):
    return procs.start(name, [*CLI, "edge", "run", "--coordinator", f"127.0.0.1:{grpc_port}", "--data", str(data),
                              "--cache-dir", str(procs.folder / f"cache-{name}"), "--name", name, "--token", token,
                              "--poll-wait-ms", "1000", "--insecure", *extra])


def accuracy(model, test) -> float:
    t = np.load(test)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return float((sess.run(None, {"x": t["x"]})[0].argmax(axis=1) == t["labels"]).mean())


def test_two_python_devices_and_two_browser_tabs_train_three_rounds_of_fedavg(procs, tmp_path, mlp_artifacts, shards):
    node, _ = node_or_skip(), chromium_or_skip()
    dist = web_build()
    state = tmp_path / "state"
    tokens = {name: enroll(state, name) for name in ("py0", "py1", "tab0", "tab1")}
    grpc_port, web_port = start_web_coordinator(procs, mlp_artifacts, state, dist, rounds=3, min_clients=4,
                                                lr=0.003, round_timeout=90)
    edges = [start_python_edge(procs, grpc_port, shards[i], f"py{i}", tokens[f"py{i}"]) for i in range(2)]
    tabs = run_tabs(node, web_port, [(f"tab{i}", tokens[f"tab{i}"], str(shards[2 + i])) for i in range(2)])
    for p in edges:
        assert finish(p, 120) == 0, p.err_path.read_text()[-3000:]
    for name, tab in tabs.items():
        assert [r["round"] for r in tab["reports"] if r["kind"] == "fit"] == [1, 2, 3], tab
        assert all(r["outcome"] == "accepted" for r in tab["reports"]), tab
    clients = {c for (c,) in query(state, "SELECT DISTINCT client_id FROM submissions")}
    assert clients == {"py0", "py1", "tab0", "tab1"}
    assert [fedavg_matches(state, r) for r in (1, 2, 3)] == [4, 4, 4]
    acc = [accuracy(state / "models" / f"round-{r:04d}" / "model.onnx", shards["test"]) for r in (1, 3)]
    assert acc[1] > acc[0], acc


@pytest.mark.parametrize("lost", ["request", "response"])
def test_an_upload_cut_midway_resumes_from_the_last_acknowledged_part(procs, tmp_path, mlp_artifacts, shards, lost):
    node = node_or_skip()
    web_build()
    state = tmp_path / "state"
    token = enroll(state, "cut")
    _, web_port = start_web_coordinator(procs, mlp_artifacts, state, WEB / "dist", rounds=1, min_clients=1,
                                        round_timeout=60)
    part = 8192
    done = subprocess.run([node, str(WEB / "test" / "drivers" / "cut-upload.mjs"), f"http://127.0.0.1:{web_port}",
                           token, str(shards[0]), str(tmp_path / "cache"), str(part), "3", lost],
                          capture_output=True, text=True, timeout=120, cwd=WEB)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["cut"] and [r["outcome"] for r in out["reports"]] == ["accepted"]
    assert out["payloadBytes"] == 4 * 9610
    assert out["payloadBytes"] <= out["partBytes"] <= out["payloadBytes"] + part   # sent twice: at most one part
    assert fedavg_matches(state, 1) == 1   # the committed global is exactly the update, intact


def test_a_tab_reloaded_mid_run_rejoins_as_the_same_device_from_its_cache_and_every_round_counts_once(procs, tmp_path, mlp_artifacts,
                                                                                        shards):
    node, _ = node_or_skip(), chromium_or_skip()
    dist = web_build()
    state = tmp_path / "state"
    tokens = {name: enroll(state, name) for name in ("py0", "tab0")}
    grpc_port, web_port = start_web_coordinator(procs, mlp_artifacts, state, dist, rounds=3, min_clients=2,
                                                round_timeout=90)
    edge = start_python_edge(procs, grpc_port, shards[0], "py0", tokens["py0"])
    tab = run_tabs(node, web_port, [("tab0", tokens["tab0"], str(shards[1]))], "--reload", "tab0")["tab0"]
    assert finish(edge, 120) == 0, edge.err_path.read_text()[-3000:]
    assert tab["clientIds"] == ["tab0", "tab0"] and tab["resumed"] == [False, True], tab   # the id came from IndexedDB
    assert tab["artifactDownloads"] == [4, 0], tab   # and the artifacts too
    assert [fedavg_matches(state, r) for r in (1, 2, 3)] == [2, 2, 2]


def _refused(procs, tmp_path, mlp_artifacts):
    state = tmp_path / "state"
    tokens = {name: enroll(state, name) for name in ("tab0", "tab1", "gone")}
    subprocess.run([*CLI, "coordinator", "revoke", "gone", "--state-dir", str(state)], check=True, timeout=60,
                   capture_output=True)
    _, web_port = start_web_coordinator(procs, mlp_artifacts, state, WEB / "dist", rounds=1, min_clients=3)
    return tokens, web_port


def test_tabs_with_no_a_forged_or_a_revoked_token_are_refused_unauthenticated(procs, tmp_path, mlp_artifacts, shards):
    node, _ = node_or_skip(), chromium_or_skip()
    web_build()
    tokens, web_port = _refused(procs, tmp_path, mlp_artifacts)
    forged = tokens["tab0"][:-4] + ("aaaa" if not tokens["tab0"].endswith("aaaa") else "bbbb")
    tabs = run_tabs(node, web_port, [("none", "", str(shards[0])), ("forged", forged, str(shards[0])),
                                     ("revoked", tokens["gone"], str(shards[0]))], ok=False)
    for name in ("none", "forged", "revoked"):
        assert tabs[name]["clientIds"] == [] and "[unauthenticated]" in tabs[name]["error"], tabs[name]


def test_a_token_naming_another_device_is_refused_permission_denied(procs, tmp_path, mlp_artifacts):
    node = node_or_skip()
    web_build()
    tokens, web_port = _refused(procs, tmp_path, mlp_artifacts)
    probe = WEB / "test" / "drivers" / "join-as.mjs"

    def join_as(token: str, client_id: str) -> dict:
        done = subprocess.run([node, str(probe), f"http://127.0.0.1:{web_port}", token, client_id],
                              capture_output=True, text=True, timeout=60, cwd=WEB, check=True)
        return json.loads(done.stdout)

    assert join_as(tokens["tab1"], "tab1") == {"code": "ok", "message": "tab1"}
    refused = join_as(tokens["tab1"], "tab0")
    assert refused["code"] == "PermissionDenied", refused


def lossy_fedavg_matches(state, round: int, length: int) -> dict[str, str]:
    """Assert the global after `round` is the weighted mean of its updates, each decoded as the coordinator
    must (raw: the vector; fp16 / int8: the round's global plus the decoded delta); returns codec by client."""
    from fedort.protos.update_codecs import get_codec

    base = np.fromfile(state / "vectors" / f"round-{round:04d}.f32", dtype="<f4")
    rows = query(state, "SELECT client_id, num_examples, codec, spool_path FROM submissions WHERE round = ?", round)
    acc, total = np.zeros(length, np.float64), 0
    for _, n, codec, path in rows:
        data = (state / path).read_bytes()
        vector = (np.frombuffer(data, dtype="<f4") if codec in ("", "raw")
                  else base + get_codec(codec).decode(data, length))
        acc += n * vector.astype(np.float64)
        total += n
    got = np.fromfile(state / "vectors" / f"round-{round + 1:04d}.f32", dtype="<f4")
    np.testing.assert_allclose(got, (acc / total).astype(np.float32), rtol=1e-5, atol=1e-6)
    return {client: codec for client, _, codec, _ in rows}


def test_fp16_and_int8_updates_from_tabs_and_a_python_device_average_as_decoded(procs, tmp_path, mlp_artifacts, shards):
    node, _ = node_or_skip(), chromium_or_skip()
    dist = web_build()
    state = tmp_path / "state"
    tokens = {name: enroll(state, name) for name in ("py0", "tab0", "tab1")}
    grpc_port, web_port = start_web_coordinator(procs, mlp_artifacts, state, dist, rounds=2, min_clients=3,
                                                round_timeout=90)
    edge = start_python_edge(procs, grpc_port, shards[0], "py0", tokens["py0"], "--codec", "int8")
    run_tabs(node, web_port, [("tab0", tokens["tab0"], f"{shards[1]},fp16"), ("tab1", tokens["tab1"], f"{shards[2]},int8")])
    assert finish(edge, 120) == 0, edge.err_path.read_text()[-3000:]
    for r in (1, 2):
        assert lossy_fedavg_matches(state, r, 9610) == {"py0": "int8", "tab0": "fp16", "tab1": "int8"}


@pytest.mark.parametrize("flags, missing", [({"secagg": ""}, "secure aggregation"), ({"codec": "topk"}, "topk")])
def test_a_run_the_web_client_cannot_do_refuses_its_join_naming_what_is_missing(procs, tmp_path, mlp_artifacts,
                                                                                 flags, missing):
    node = node_or_skip()
    web_build()
    state = tmp_path / "state"
    token = enroll(state, "tab0")
    _, web_port = start_web_coordinator(procs, mlp_artifacts, state, WEB / "dist", rounds=1, min_clients=3, **flags)
    done = subprocess.run([node, str(WEB / "test" / "drivers" / "join-as.mjs"), f"http://127.0.0.1:{web_port}", token,
                           ""], capture_output=True, text=True, timeout=60, cwd=WEB, check=True)
    refused = json.loads(done.stdout)
    assert refused["code"] == "FailedPrecondition" and missing in refused["message"], refused


def test_the_node_device_command_trains_and_evaluates_with_a_python_device(procs, tmp_path, mlp_artifacts, shards):
    node = node_or_skip()
    dist = web_build()
    state = tmp_path / "state"
    tokens = {name: enroll(state, name) for name in ("py0", "node0")}
    grpc_port, web_port = start_web_coordinator(procs, mlp_artifacts, state, dist, rounds=2, min_clients=2,
                                                round_timeout=90, fraction_evaluate=1.0)
    edge = start_python_edge(procs, grpc_port, shards[0], "py0", tokens["py0"])
    device = procs.start("node0", [node, str(dist / "node-device.js"), "--coordinator", f"http://127.0.0.1:{web_port}",
                                   "--token", tokens["node0"], "--data", str(shards[1]), "--name", "node0",
                                   "--codec", "int8", "--cache", str(tmp_path / "cache-node0"), "--poll-wait-ms", "1000"])
    assert finish(device, 120) == 0, device.err_path.read_text()[-3000:]
    assert finish(edge, 120) == 0, edge.err_path.read_text()[-3000:]
    events = [json.loads(line) for line in device.out_path.read_text().splitlines()]
    assert events[0]["type"] == "joined" and events[0]["clientId"] == "node0" and events[-1] == {"type": "done"}
    reports = [e["report"] for e in events if e["type"] == "report"]
    fits = [(r["round"], r["outcome"], r["codec"]) for r in reports if r["kind"] == "fit"]
    assert fits == [(1, "accepted", "int8"), (2, "accepted", "int8")]
    evaluations = [r for r in reports if r["kind"] == "evaluate"]
    assert evaluations and all(r["outcome"] == "accepted" and 0 <= r["metrics"]["val_accuracy"] <= 1
                               for r in evaluations), reports
    assert [lossy_fedavg_matches(state, r, 9610) for r in (1, 2)] == [{"py0": "raw", "node0": "int8"}] * 2


def test_an_upload_the_coordinator_dropped_while_idle_is_begun_again(procs, tmp_path, mlp_artifacts, shards):
    node = node_or_skip()
    web_build()
    state = tmp_path / "state"
    token = enroll(state, "cut")
    config = tmp_path / "coordinator.toml"
    config.write_text("[coordinator]\nupload_resume_idle_s = 1.0\n")
    _, web_port = start_web_coordinator(procs, mlp_artifacts, state, WEB / "dist", rounds=1, min_clients=1,
                                        round_timeout=60, config=config)
    part = 8192
    done = subprocess.run([node, str(WEB / "test" / "drivers" / "cut-upload.mjs"), f"http://127.0.0.1:{web_port}",
                           token, str(shards[0]), str(tmp_path / "cache"), str(part), "3", "expire"],
                          capture_output=True, text=True, timeout=120, cwd=WEB)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["cut"] and [r["outcome"] for r in out["reports"]] == ["accepted"]
    assert out["partBytes"] == out["payloadBytes"] + 3 * part   # two parts before the drop, the refused one, then all
    assert fedavg_matches(state, 1) == 1


def test_the_same_task_gives_the_same_update_from_the_python_and_the_typescript_client(procs, tmp_path, mlp_artifacts,
                                                                                       shards):
    """Conformance over the wire: two identical one-round runs, one served to the Python device over gRPC, one to the
    Node device over the web port, under the same device id: the same task (seed, epochs, batch, rate) trains the
    same update on the same number of examples."""
    node = node_or_skip()
    dist = web_build()
    updates = {}
    for client in ("python", "typescript"):
        state = tmp_path / client / "state"
        token = enroll(state, "dev")
        grpc_port, web_port = start_web_coordinator(procs, mlp_artifacts, state, dist, rounds=1, min_clients=1,
                                                    round_timeout=60, seed=11, lr=0.01, local_epochs=2, batch_size=16)
        if client == "python":
            device = start_python_edge(procs, grpc_port, shards[0], "dev", token)
        else:
            device = procs.start("dev-ts", [node, str(dist / "node-device.js"), "--coordinator",
                                            f"http://127.0.0.1:{web_port}", "--token", token, "--data", str(shards[0]),
                                            "--name", "dev", "--cache", str(tmp_path / "cache-ts"),
                                            "--poll-wait-ms", "1000"])
        assert finish(device, 120) == 0, device.err_path.read_text()[-3000:]
        ((n, path),) = query(state, "SELECT num_examples, spool_path FROM submissions")
        updates[client] = (n, np.fromfile(state / path, dtype="<f4"))
        procs.kill_all()
    (n_py, py), (n_ts, ts) = updates["python"], updates["typescript"]
    assert n_ts == n_py == 250
    start = np.fromfile(tmp_path / "python" / "state" / "vectors" / "round-0001.f32", dtype="<f4")
    moved = np.abs(py - start).max()
    assert moved > 1e-2 and np.abs(ts - py).max() < 1e-3 * moved
