"""A token store in a bucket: a shuffled epoch over it, served by an HTTP server that
counts what it sends, fetches each byte a packed row needs about once, on 1 and 2
processes; and 2 processes write a store to a URL as 1 writes it to a folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _support import store_checks
from _support.range_server import RangeServer

from datarax.distributed import launch_local

# A store's tokens are fetched at most this many times over an epoch (plus its indexes,
# a copy a process at most).
FETCHED_PER_DELIVERED = 1.1


def _index_bytes(folder: Path) -> int:
    """Bytes of a store's indexes and manifest."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".idx", ".json"))


@pytest.mark.multihost
def test_a_shuffled_epoch_over_a_store_in_a_bucket_fetches_each_byte_about_once(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "bucket" / "store"
    store_checks.write(str(folder))
    itemsize = 2  # the corpus's tokens are below 65,536: a uint16 store
    local = store_checks.read_epoch(str(folder), str(tmp_path / "local-cache"))
    with RangeServer(tmp_path / "bucket") as server:
        url = server.url_of("store")
        alone = store_checks.read_epoch(url, str(tmp_path / "cache-1"))
        served = {1: server.bytes_served}
        server.reset()
        on_two = launch_local(
            store_checks.read_epoch,
            num_processes=2,
            devices_per_process=2,
            args=(url, str(tmp_path / "cache-2")),
            timeout_s=120,
        )
        served[2] = server.bytes_served
        assert not server.errors
    assert alone["tokens"] == local["tokens"]
    assert on_two[0].value["tokens"] == on_two[1].value["tokens"] == local["tokens"]
    delivered = local["real"] * itemsize
    assert delivered > 0.8 * sum(p.stat().st_size for p in folder.glob("*.bin"))
    for processes, count in served.items():
        bound = FETCHED_PER_DELIVERED * delivered + processes * _index_bytes(folder)
        assert delivered <= count <= bound, (processes, count, delivered, bound)


@pytest.mark.multihost
def test_two_processes_write_a_store_to_a_url_as_one_writes_it_to_a_folder(
    tmp_path: Path,
) -> None:
    store_checks.write(str(tmp_path / "one"))
    launch_local(
        store_checks.write_to_url,
        num_processes=2,
        devices_per_process=1,
        args=(f"shared://{tmp_path / 'two'}",),
        timeout_s=120,
        env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    one, two = (sorted((tmp_path / name).iterdir()) for name in ("one", "two"))
    assert [p.name for p in two] == [p.name for p in one]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(one, two, strict=True))
    assert len(one) == 1 + 2 * 8
    assert np.array_equal(
        np.fromfile(tmp_path / "two" / "shard-00000.bin", np.uint16)[:3],
        store_checks.corpus()[0][:3],
    )
