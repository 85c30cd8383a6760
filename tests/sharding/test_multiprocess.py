"""Real multi-process JAX clusters on 127.0.0.1, started with `datarax.distributed`.

Each cluster is launched once per module (several checks per launch, in
`_support/multihost_checks.py`); the assertions run here, in the test process.
"""

from __future__ import annotations

import itertools
import pickle
import re
import socket
import sys
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _support import multihost_checks as checks
from _support.processes import TESTS, still_running

from datarax.distributed import ClusterError, ProcessResult, _launcher, launch_local
from datarax.distributed._launcher import _describe_target
from datarax.distributed._report import report

TWO_BY_TWO = {"num_processes": 2, "devices_per_process": 2, "timeout_s": 90}


@pytest.fixture(scope="module")
def two_host_runs() -> list[ProcessResult]:
    """One 2-process cluster runs every 2-host check; each test reads its part."""
    return launch_local(checks.two_host_checks, **TWO_BY_TWO)


def _part(runs: list[ProcessResult], name: str) -> list[ProcessResult]:
    return [ProcessResult(r.process_index, r.value[name], r.output) for r in runs]


@pytest.fixture(scope="module")
def two_hosts(two_host_runs: list[ProcessResult]) -> list[ProcessResult]:
    return _part(two_host_runs, "one_d")


@pytest.fixture(scope="module")
def four_host_runs() -> list[ProcessResult]:
    return launch_local(
        checks.four_host_checks, num_processes=4, devices_per_process=2, timeout_s=120
    )


@pytest.fixture(scope="module")
def four_hosts(four_host_runs: list[ProcessResult]) -> list[ProcessResult]:
    return _part(four_host_runs, "one_d")


@pytest.fixture(scope="module")
def two_d(two_host_runs: list[ProcessResult]) -> list[ProcessResult]:
    return _part(two_host_runs, "two_d")


@pytest.fixture(scope="module")
def pipeline_runs(two_host_runs: list[ProcessResult]) -> list[ProcessResult]:
    return _part(two_host_runs, "pipeline")


@pytest.fixture(scope="module")
def prefetched(two_host_runs: list[ProcessResult]) -> list[ProcessResult]:
    return _part(two_host_runs, "prefetch")


@pytest.fixture(scope="module")
def mismatch(two_host_runs: list[ProcessResult]) -> list[ProcessResult]:
    return _part(two_host_runs, "mismatch")


@pytest.mark.multihost
@pytest.mark.parametrize("hosts", ["two_hosts", "four_hosts"])
def test_bounds_and_global_batch(hosts: str, request: pytest.FixtureRequest) -> None:
    results: list[ProcessResult] = request.getfixturevalue(hosts)
    count = len(results)
    data = checks._global_data()
    per_host = checks.GLOBAL_ROWS // count
    for result in results:
        value: dict[str, Any] = result.value
        index = result.process_index
        assert value["process"] == (index, count, 2 * count)
        assert value["bounds"] == (index * (10 // count), (index + 1) * (10 // count))
        assert value["local_ids"] == list(range(index * per_host, (index + 1) * per_host))
        assert value["global_shape"] == (checks.GLOBAL_ROWS, 3)
        np.testing.assert_array_equal(value["global_x"], data["x"])
        assert value["shards_match"] and value["again_same"]
        assert value["sum"] == pytest.approx(float(data["x"].sum()))
        assert value["mean"] == pytest.approx(float(data["x"].mean()))
        assert value["id_sum"] == int(data["id"].sum())
        # The placement plot of the real global array labels every device with its host.
        labels, hosts = value["plot_labels"], value["device_hosts"]
        assert sorted(labels) == sorted(hosts) and sorted(set(hosts.values())) == list(range(count))
        for device, text in labels.items():
            assert f"host {hosts[device]}" in text, (device, text)
    keep = [tuple(r.value["bounds_keep"]) for r in results]
    assert keep[0][0] == 0 and keep[-1][1] == 10
    assert all(a[1] == b[0] for a, b in itertools.pairwise(keep))


@pytest.mark.multihost
def test_two_d_mesh_across_processes(two_d: list[ProcessResult]) -> None:
    matrix = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    for result in two_d:
        for name in ("rows", "rows_replicated", "columns"):
            shape, gathered, shards_match = result.value[name]
            assert shape == (8, 4), name
            np.testing.assert_array_equal(gathered, matrix)
            assert shards_match, name
        np.testing.assert_array_equal(result.value["column_sums"], matrix.sum(axis=0))


@pytest.mark.multihost
def test_pipeline_hosts_split_each_global_batch(pipeline_runs: list[ProcessResult]) -> None:
    host0, host1 = (r.value for r in pipeline_runs)
    order = host0["order"]
    np.testing.assert_array_equal(order, host1["order"])  # one global permutation
    assert sorted(order.tolist()) == list(range(48)) and order.tolist() != list(range(48))
    assert host0["global_ids"] == host1["global_ids"]
    seen: list[int] = []
    for step, global_ids in enumerate(host0["global_ids"]):
        ids0, ids1 = host0["local_ids"][step], host1["local_ids"][step]
        assert not set(ids0) & set(ids1)
        assert ids0 + ids1 == global_ids == order[step * 8 : (step + 1) * 8].tolist()
        seen += global_ids
    assert sorted(seen) == list(range(48))


@pytest.mark.multihost
def test_prefetch_builds_global_batches_from_each_hosts_rows(
    prefetched: list[ProcessResult],
) -> None:
    # 16 rows: host 0 holds ids 0-7, host 1 ids 8-15; each global batch of 4 takes the
    # next 2 rows of each host, in process order.
    expected = [[2 * k, 2 * k + 1, 8 + 2 * k, 9 + 2 * k] for k in range(4)]
    for result in prefetched:
        assert result.value["global_ids"] == expected
        assert result.value["first"] == expected[0]
        assert result.value["prefetch_threads_left"] == []


@pytest.mark.multihost
def test_mismatched_hosts_get_a_clear_error_each(mismatch: list[ProcessResult]) -> None:
    for result in mismatch:
        said = result.value["messages"]
        for case in ("shape", "changed_later"):
            assert said[case]["type"] == "HostMismatchError"
            assert (said[case]["what"], said[case]["leaf"]) == ("global shape", "batch['x']")
            assert said[case]["values"] == [(8, 3), (4, 3)] and said[case]["processes"] == (0, 1)
            text = said[case]["text"]
            assert "row counts of batch['x'] that make different global arrays" in text
            assert "shape (4, 3), making (8, 3) on process 0" in text
            assert "shape (2, 3), making (4, 3) on process 1" in text
        assert (said["dtype"]["type"], said["dtype"]["what"]) == ("HostMismatchError", "dtype")
        assert said["dtype"]["values"] == ["int32", "float32"]
        assert (
            "dtype of batch['x']: int32 on process 0, float32 on process 1" in said["dtype"]["text"]
        )
        assert (said["deleted"]["type"], said["deleted"]["leaf"]) == ("LeafTypeError", "batch['x']")
        assert (
            "batch['x'] is a jax.Array that has been deleted or donated" in said["deleted"]["text"]
        )
        assert result.value["messages"]["live_again"] == (8, 3)
        assert (said["structure"]["what"], said["structure"]["leaf"]) == ("structure", None)
        assert "different structure" in said["structure"]["text"]
        assert "'y'" in said["structure"]["text"] and "'x'" in said["structure"]["text"]
        # Each host finds this one itself; process 0's error is raised on both.
        assert said["per_host_rows"]["type"] == "LeafShapeError"
        assert said["per_host_rows"]["shape"] == (3, 3) and said["per_host_rows"]["parts"] == 2
        assert "(shape (3, 3) on this host)" in said["per_host_rows"]["text"]
        assert "multiple of 2" in said["per_host_rows"]["text"]
        assert said["per_host_rows"]["text"].startswith(
            "batch['x']" if result.process_index == 0 else "On process 0: batch['x']"
        )
        assert result.value["after"] == 4 * 3 * 2  # the cluster still works afterwards
        assert result.value["texts"] == ["hello from 0", "hello from 1hello from 1"]


def _expected_rows(layout: str, host: int, count: int) -> list[int] | None:
    """The global rows host `host` of `count` must read, worked out by hand (16 rows)."""
    block = 16 // (2 * count)
    if layout in ("model_across_hosts", "replicated", "columns_across_hosts"):
        return list(range(16))
    if layout in ("interleaved", "combined_axes"):  # blocks h and count + h
        first, second = host * block, (count + host) * block
        return [*range(first, first + block), *range(second, second + block)]
    if layout == "one_device_per_host":
        return list(range(host * 16 // count, (host + 1) * 16 // count))
    if layout == "host0_only":
        return list(range(16)) if host == 0 else []
    return None  # all_hosts_1d: jax.make_mesh chooses the device order


@pytest.mark.multihost
@pytest.mark.parametrize("hosts", ["two_host_runs", "four_host_runs"])
def test_every_layout_builds_the_global_batch(hosts: str, request: pytest.FixtureRequest) -> None:
    runs: list[ProcessResult] = request.getfixturevalue(hosts)
    count = len(runs)
    data = checks._global_data()
    layouts = runs[0].value["layouts"]
    assert len(layouts) == 8 and all(
        sorted(run.value["layouts"]) == sorted(layouts) for run in runs
    )
    for name in layouts:
        every_row: list[int] = []
        for run in runs:
            got = run.value["layouts"][name]
            assert got["ledger_rows"] == (got["local_ids"] or got["ledger_rows"]), name
            expected = _expected_rows(name, run.process_index, count)
            if expected is not None:
                assert got["ledger_rows"] == expected, (name, run.process_index)
            if got["local_ids"] is not None:
                assert got["local_ids"] == got["ledger_rows"], name
            every_row += got["ledger_rows"]
            assert got["shards_match"], (name, run.process_index)
            if name == "columns_across_hosts":
                assert got["shapes"] == {"m": (16, 4 * count)}
                assert got["local_rows"] == 16
                continue
            assert got["shapes"] == {"x": (16, 3), "id": (16,), "scale": ()}, name
            if got["gathered_match"] is not None:
                assert got["gathered_match"], (name, run.process_index)
            if name != "host0_only" or run.process_index == 0:
                assert got["scale"] == 0.5
            if got["sum"] is not None:
                assert got["sum"] == pytest.approx(float(data["x"].sum()))
        assert set(every_row) == set(range(16)), name  # together the hosts read every row


@pytest.mark.multihost
def test_replicas_that_differ_raise_on_every_host(two_host_runs: list[ProcessResult]) -> None:
    for run in two_host_runs:
        said = run.value["conflicts"]
        for case in ("grain_bounds", "scalar", "later_strict", "second_sharder"):
            assert said[case]["type"] == "HostMismatchError", case
            assert said[case]["what"] == "replicated data", case
            assert said[case]["processes"] == (0, 1), case
        assert said["grain_bounds"]["leaf"] == "batch['id']"
        text = said["grain_bounds"]["text"]
        # Each host passed 8 rows, so the global batch has 8 and both hosts hold all of it.
        assert text.startswith(
            "Processes [0, 1] all hold rows 0-3 of batch['id'] (of the 8-row global batch their "
            "row counts make) under this sharding"
        )
        assert "(mesh axis 'model' spans them), but passed different data" in text
        assert "shard_data(data, sharding=sharding)" in text
        assert said["seconds"] < 10
        assert said["scalar"]["leaf"] == "batch['lr']"
        assert (
            "Processes [0, 1] all hold batch['lr'] (a 0-d leaf, replicated"
            in said["scalar"]["text"]
        )
        assert "Processes [0, 1] all hold rows" in said["later_strict"]["text"]
        assert said["later_default_passes"] == (16, 3)
        assert (said["uneven"]["what"], said["uneven"]["values"]) == (
            "global shape",
            [(9, 2), (18, 2)],
        )
        assert "make different global arrays" in said["uneven"]["text"]
        assert "shape (6, 2), making (9, 2) on process 0" in said["uneven"]["text"]
        assert "shape (6, 2), making (18, 2) on process 1" in said["uneven"]["text"]
        rows = 8 if run.process_index == 0 else 4
        assert said["uneven_fixed"] == (rows, (12,))
        assert "Processes [0, 1] all hold rows" in said["second_sharder"]["text"]


def _assert_gone(outputs: list[str]) -> None:
    pids = [int(m) for out in outputs for m in re.findall(r"^pid (\d+)", out, re.MULTILINE)]
    assert len(pids) == len(outputs)
    assert not still_running(pids, 5), pids


def _cluster_failure(target: Any, within_s: float, **options: Any) -> ClusterError:
    """The ClusterError that launch_local(target, ...) raises, checked to come in time."""
    start = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        launch_local(target, num_processes=2, **options)
    assert time.monotonic() - start < within_s
    return caught.value


@pytest.mark.multihost
def test_a_raising_process_is_reported() -> None:
    error = _cluster_failure(checks.raise_on_process_one, 60, timeout_s=90)
    assert error.process_index == 1
    message = str(error)
    assert "Process 1 of 2 raised RuntimeError: process one gives up" in message
    assert "Process 0 was still running; the launcher stopped it." in message
    _assert_gone(error.outputs)


@pytest.mark.multihost
def test_a_killed_script_process_is_reported() -> None:
    script = TESTS / "_support" / "multihost_kill_script.py"
    error = _cluster_failure(script, 60, args=("a", 1), timeout_s=90)
    assert error.process_index == 1
    assert "Process 1 of 2 was killed by SIGKILL" in str(error)
    assert "argv ['a', '1']" in error.outputs[0]
    _assert_gone(error.outputs)


@pytest.mark.multihost
def test_a_time_out_names_the_process_still_working() -> None:
    # 30 s leaves time to start on a loaded machine. Process 0 returns at once and waits
    # for process 1 at the shutdown barrier, which gives up after 10 s and aborts both
    # (newer jax) or is stopped by the launcher (jax 0.7), unless the launcher's 30 s
    # run out first: either way process 1 is to blame.
    error = _cluster_failure(checks.busy_on_process_one, 60, timeout_s=30)
    assert error.process_index == 1
    message = str(error)
    if message.startswith("Local JAX cluster failed: "):
        assert "\nProcess 1 of 2 was still running; the launcher stopped it." in message
    else:
        assert message.startswith("Process 1 of 2 aborted with SIGABRT.")
    assert "Its target never returned, and process 0, done, gave up waiting for it." in message
    assert re.search(r"Process 0 (had returned and was waiting|returned, then)", message)
    _assert_gone(error.outputs)


@pytest.mark.multihost
def test_a_coordinator_whose_port_is_taken_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    # Taken on both starts: the launcher starts the cluster a second time (with a
    # warning), which fails the same way.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(_launcher, "free_port", lambda: port)
        with pytest.warns(RuntimeWarning, match=f"could not start on 127.0.0.1:{port} "):
            error = _cluster_failure(checks.one_d_checks, 80, timeout_s=90)
    assert error.process_index == 0
    message = str(error)
    assert message.startswith("Process 0 of 2 ")  # raised, or crashed with SIGSEGV
    assert "Process 0 runs the coordinator, and it failed to start 2 times" in message
    assert f"'127.0.0.1:{port}'" in message  # JAX's line naming the port, in the tail
    assert "Process 1 was still running; the launcher stopped it (it never joined" in message


@pytest.mark.multihost
def test_what_a_process_started_is_stopped_with_it() -> None:
    runs = launch_local(checks.start_a_straggler, num_processes=2, timeout_s=90)
    children = {run.value: run.process_index for run in runs}
    left = still_running(children, 5)
    assert not left, f"the children {left} of processes {[children[pid] for pid in left]}"


@pytest.mark.multihost
def test_bad_targets_are_refused_before_starting() -> None:
    with pytest.raises(TypeError, match="lambda"):
        launch_local(lambda: 0)
    with pytest.raises(ValueError, match=r"not a \.py file"):
        launch_local(TESTS / "missing.py")
    with pytest.raises(ValueError, match="num_processes must be a positive int"):
        launch_local(checks.one_d_checks, num_processes=0)


def test_targets_travel_by_reference_by_module_name_or_by_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kind, payload = _describe_target(checks.one_d_checks)
    assert kind == "reference" and pickle.loads(payload) is checks.one_d_checks
    main_globals = vars(sys.modules["__main__"])
    exec("def in_main():\n    return 1\n", main_globals)
    in_main = main_globals.pop("in_main")
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", SimpleNamespace(name="pkg.tool"))
    assert _describe_target(in_main) == ("import", ("pkg.tool", "in_main"))
    elsewhere: dict[str, Any] = {"__name__": "__main__"}  # like a notebook cell's function
    # A file name nothing has cached source for (under pytest-xdist on Python 3.13,
    # "<string>" holds the worker's own `python -c` code).
    exec(compile("def in_cell():\n    return 1\n", "<a cell gone>", "exec"), elsewhere)
    with pytest.raises(TypeError, match="source of in_cell cannot be found"):
        _describe_target(elsewhere["in_cell"])


def test_report_blames_a_process_that_never_reached_initialize() -> None:
    culprit, message = report(
        first=0,
        reason="",
        codes=[-6, None],
        records=[None, None],
        outputs=["F0101 client.h:80] Terminating process\n    @     0x7f02 absl::Flush()\n", ""],
        stages=["joining", "starting"],
    )
    assert culprit == 1
    assert message.startswith("Process 1 of 2 never joined the cluster")
    assert "Process 0 aborted with SIGABRT (it never joined the cluster)." in message
    assert (
        "0x7f02"
        not in report(
            0, "", [-6, -6], [None, None], ["    @ 0x7f02 f()"] * 2, ["joining", "joining"]
        )[1]
    )


def test_report_names_a_coordinator_that_died_and_a_time_out() -> None:
    culprit, message = report(0, "", [-11, 1], [None, None], ["", ""], ["joining", "joining"])
    assert culprit == 0 and "crashed with SIGSEGV" in message and "port was taken" in message
    culprit, message = report(
        None,
        "the cluster did not finish within 9 s",
        [0, None],
        [("ok", 1), None],
        ["", "still working"],
        ["joined", "joined"],
    )
    assert culprit == 1
    assert message.startswith("Local JAX cluster failed: the cluster did not finish within 9 s.")
    assert "Process 1 of 2 was still running; the launcher stopped it." in message
    assert "| still working" in message and "Process 0 finished." in message


@pytest.mark.multihost
@pytest.mark.parametrize("hosts", ["two_host_runs", "four_host_runs"])
def test_global_pipeline_reads_only_each_hosts_rows(
    hosts: str, request: pytest.FixtureRequest
) -> None:
    runs: list[ProcessResult] = request.getfixturevalue(hosts)
    count = len(runs)
    for name in ("all_hosts_1d", "model_across_hosts", "interleaved"):
        order = runs[0].value["global_pipeline"][name]["order"]
        expected = [order[16 * k : 16 * (k + 1)] for k in range(4)]
        for run in runs:
            got = run.value["global_pipeline"][name]
            assert got["order"] == order, name  # one global order on every host
            assert got["global_ids"] == expected, (name, run.process_index)
            mine = got["ledger"][0]
            for k, reads in enumerate(got["reads"]):
                assert reads == sorted(expected[k][i] for i in mine), (name, run.process_index, k)
            share = 16 if name == "model_across_hosts" else 16 // count
            assert {len(reads) for reads in got["reads"]} == {share}, name


@pytest.mark.multihost
def test_uneven_epochs_stop_together_or_raise_everywhere(
    two_host_runs: list[ProcessResult],
) -> None:
    for run in two_host_runs:
        got = run.value["epoch_end"]
        assert got["stop"] == 5 and got["stop_seconds"] < 10
        assert (
            "different numbers of batches left in epoch 0: 5 on process 0, 6 on process 1"
            in got["raise"]
        )
        assert got["raise_seconds"] < 10
        if run.process_index == 0:
            assert got["alone"] == 5


@pytest.mark.multihost
def test_however_the_sharder_is_held_the_hosts_agree(two_host_runs: list[ProcessResult]) -> None:
    """A sharder in a plain class or reached through a dict: 5 and 3 batches stop at 3
    on both hosts, or raise on both; the jitted step after each batch never hangs."""
    for run in two_host_runs:
        got = run.value["held_sharder"]
        assert got["stop"] == {"plain_class": 3, "dict": 3}
        for text in got["raise"].values():
            assert "in epoch 0: 5 on process 0, 3 on process 1" in text
        assert "different uneven_hosts: 'stop' on process 0, 'raise' on process 1" in got["mixed"]
        assert "batch['x'] has shape (4, 4) (rank 2), but the PartitionSpec" in got["rank"]


@pytest.mark.multihost
def test_packed_mixture_rows_are_one_global_batch_on_2_and_4_hosts(
    two_host_runs: list[ProcessResult], four_host_runs: list[ProcessResult]
) -> None:
    """Rows packed from a mixture: the batches of one process on 2 and 4 hosts, each host
    reading only the documents of its rows, and the state saved on 2 hosts resumed on 4."""
    from flax import nnx

    from datarax.pipeline import Mixture, Packed, Pipeline

    sources = {"web": checks.CountingDocuments(300, 1), "code": checks.CountingDocuments(200, 2)}
    mixture = Mixture(sources, {"web": 3, "code": 1}, rngs=nnx.Rngs(4))
    packed = Packed(mixture, 32)
    alone = Pipeline(source=packed, batch_size=16, shuffle=True, rngs=nnx.Rngs(6))
    reference = [batch["tokens"].tolist() for batch in alone]
    order = alone.epoch_order(0)
    assert len(reference) == len(packed) // 16 >= 4
    saved = [run.value["packed"]["state"] for run in two_host_runs]
    for runs in (two_host_runs, four_host_runs):
        for run in runs:
            got = run.value["packed"]
            assert got["order"] == order.tolist()
            assert got["tokens"] == reference, (len(runs), run.process_index)
            for k, reads in enumerate(got["reads"]):
                rows = order[16 * k : 16 * (k + 1)][got["mine"]]
                wanted = mixture.documents_of(packed.documents_of(rows))
                assert reads == {name: docs.tolist() for name, docs in wanted.items()}
            assert got["state"] == saved[0]  # the state names no process
            assert got["resumed"] == reference[2:]


@pytest.mark.multihost
def test_new_mixture_weights_resume_a_state_on_another_process_count(
    two_host_runs: list[ProcessResult],
) -> None:
    """A state saved on 2 hosts over weights 3:1, resumed on 2 hosts and on 1 over weights
    1:1: the same rest of the epoch as planned, then the same next epoch."""
    reference = checks.mixture_epochs({"web": 3, "code": 1})
    planned = [batch["tokens"].tolist() for batch in reference]
    for run in two_host_runs:
        got = run.value["mixture_resume"]
        assert got["before"] + got["rest"] == planned
        alone = checks.mixture_epochs({"web": 1, "code": 1})
        alone.set_state(got["state"])
        assert [batch["tokens"].tolist() for batch in alone] == got["rest"]
        assert [batch["tokens"].tolist() for batch in alone] == got["after"]
        assert got["after"] != planned[: len(got["after"])]
