"""Host bounds: disjoint, covering (or equal-sized), and identical to Grain's."""

import itertools

import numpy as np
import pytest
from grain._src.core.sharding import ShardOptions, even_split
from hypothesis import given, settings
from hypothesis import strategies as st

from datarax.sharding import JaxProcessSharderModule, shard_bounds

rows = st.integers(min_value=0, max_value=10_000)
hosts = st.integers(min_value=1, max_value=64)


@given(num_rows=rows, process_count=hosts, drop_remainder=st.booleans())
@settings(max_examples=300, deadline=None)
def test_bounds_partition_the_rows(num_rows: int, process_count: int, drop_remainder: bool) -> None:
    bounds = [
        shard_bounds(num_rows, i, process_count, drop_remainder) for i in range(process_count)
    ]
    assert bounds[0][0] == 0
    for (_, stop), (start, _) in itertools.pairwise(bounds):
        assert stop == start  # contiguous, hence disjoint
    sizes = [stop - start for start, stop in bounds]
    assert min(sizes) >= 0
    if drop_remainder:
        assert set(sizes) == {num_rows // process_count}
        assert num_rows - bounds[-1][1] == num_rows % process_count
    else:
        assert bounds[-1][1] == num_rows
        assert max(sizes) - min(sizes) <= 1


@given(num_rows=rows, process_count=hosts, drop_remainder=st.booleans(), data=st.data())
@settings(max_examples=300, deadline=None)
def test_bounds_equal_grain(num_rows: int, process_count: int, drop_remainder: bool, data) -> None:
    index = data.draw(st.integers(min_value=0, max_value=process_count - 1))
    options = ShardOptions(
        shard_index=index, shard_count=process_count, drop_remainder=drop_remainder
    )
    assert shard_bounds(num_rows, index, process_count, drop_remainder) == even_split(
        num_rows, options
    )


@pytest.mark.parametrize(
    ("drop_remainder", "expected"),
    [(False, [(0, 4), (4, 7), (7, 10)]), (True, [(0, 3), (3, 6), (6, 9)])],
)
def test_ten_rows_over_three_hosts(drop_remainder: bool, expected) -> None:
    got = [
        JaxProcessSharderModule(
            process_index=i, process_count=3, drop_remainder=drop_remainder
        ).bounds(10)
        for i in range(3)
    ]
    assert got == expected


def test_shard_data_kinds_keep_their_type() -> None:
    host = JaxProcessSharderModule(process_index=1, process_count=3, drop_remainder=False)
    array = np.arange(20).reshape(10, 2)
    local = host.shard_data(array)
    assert np.shares_memory(local, array) and local.base is not None
    np.testing.assert_array_equal(local, array[4:7])
    assert host.shard_data(list(range(10))) == [4, 5, 6]
    assert host.shard_data(tuple(range(10))) == (4, 5, 6)
    nested = host.shard_data({"image": array, "meta": {"id": np.arange(10)}})
    np.testing.assert_array_equal(nested["image"], array[4:7])
    np.testing.assert_array_equal(nested["meta"]["id"], [4, 5, 6])


def test_shard_data_treats_tuples_and_lists_inside_a_dict_as_containers() -> None:
    images, labels = np.arange(20).reshape(10, 2), np.arange(10) * 10
    for host in range(2):
        sharder = JaxProcessSharderModule(process_index=host, process_count=2)
        pair = sharder.shard_data({"pair": (images, labels), "more": [labels]})
        assert isinstance(pair["pair"], tuple) and isinstance(pair["more"], list)
        np.testing.assert_array_equal(pair["pair"][0], images[5 * host : 5 * host + 5])
        np.testing.assert_array_equal(pair["pair"][1], labels[5 * host : 5 * host + 5])
        np.testing.assert_array_equal(pair["more"][0], labels[5 * host : 5 * host + 5])
    with pytest.raises(TypeError, match=r"data\['ids'\]\[0\] is a int .*np.asarray"):
        JaxProcessSharderModule().shard_data({"ids": [1, 2, 3]})


def test_shard_data_keeps_the_mapping_type() -> None:
    from collections import OrderedDict, defaultdict

    data = defaultdict(list, {"x": np.arange(4)})
    local = JaxProcessSharderModule(process_index=1, process_count=2).shard_data(data)
    assert isinstance(local, defaultdict) and local.default_factory is list
    np.testing.assert_array_equal(local["x"], [2, 3])
    ordered = OrderedDict(b=np.arange(4), a=np.arange(4) * 2)
    local = JaxProcessSharderModule(process_index=0, process_count=2).shard_data(ordered)
    assert isinstance(local, OrderedDict) and list(local) == ["b", "a"]


def test_shard_data_on_jax_array() -> None:
    import jax.numpy as jnp

    host = JaxProcessSharderModule(process_index=3, process_count=4)
    np.testing.assert_array_equal(np.asarray(host.shard_data(jnp.arange(10))), [6, 7])
