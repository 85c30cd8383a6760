"""Code written against the original datarax sharding API runs unchanged, and what is
kept only for it warns.

The config objects, their defaults, the module paths and the extra ArraySharder
methods; docs/api.md ("The original datarax API") lists where behaviour differs.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import SharderModuleConfig
from datarax.sharding.array_sharder import ArraySharder
from datarax.sharding.jax_process_sharder import (
    JaxProcessSharderConfig,
    JaxProcessSharderModule,
)

MESH = jax.make_mesh((8,), ("data",))


def test_the_config_form_of_the_process_sharder() -> None:
    with pytest.warns(DeprecationWarning, match=r"JaxProcessSharderConfig\(...\) is deprecat"):
        assert JaxProcessSharderConfig().drop_remainder is True
    with pytest.deprecated_call():
        assert JaxProcessSharderConfig().sharding_rules is None
        sharder = JaxProcessSharderModule(
            JaxProcessSharderConfig(drop_remainder=False), rngs=nnx.Rngs(0)
        )
    with pytest.warns(DeprecationWarning, match=r"\.config is deprecated: use the sharder's at"):
        assert sharder.config.drop_remainder is False and sharder.drop_remainder is False
    assert (sharder.process_index, sharder.process_count) == (0, 1)
    assert sharder.local_device_count == 8
    images = np.arange(10)
    assert sharder.shard_data(images).tolist() == images.tolist()
    assert sharder.shard_data(list(range(5))) == [0, 1, 2, 3, 4]
    with pytest.deprecated_call():
        keep = JaxProcessSharderModule(
            JaxProcessSharderConfig(drop_remainder=False), process_index=2, process_count=3
        )
        drop = JaxProcessSharderModule(JaxProcessSharderConfig(), process_index=2, process_count=3)
    assert keep.shard_data(images).tolist() == [7, 8, 9]
    assert drop.shard_data(images).tolist() == [6, 7, 8]
    assert JaxProcessSharderModule(name="hosts").name == "hosts"


def test_the_config_form_of_the_array_sharder() -> None:
    with pytest.deprecated_call():
        config = SharderModuleConfig(sharding_rules=[("batch", "data"), ("pixels", None)])
    with pytest.warns(DeprecationWarning, match="SharderModuleConfig passed as config="):
        sharder = ArraySharder(config, rngs=nnx.Rngs(0))
    with pytest.deprecated_call():
        assert sharder.config.sharding_rules == (("batch", "data"), ("pixels", None))
    assert sharder.get_partition_spec(("batch", "pixels")) == P("data", None)
    assert sharder.get_partition_spec(P("model")) == P("model")  # mesh axes, unchanged
    batch = {"x": np.arange(16.0).reshape(8, 2)}
    placed = sharder.shard_with_logical_names(batch, MESH, ("batch", "pixels"))
    assert placed["x"].sharding.spec == P("data", None)
    with pytest.warns(DeprecationWarning, match=r"use ArraySharder\(\)\.shard\(batch, shardi"):
        static = ArraySharder.shard_static(batch, NamedSharding(MESH, P("data")))
    np.testing.assert_array_equal(np.asarray(static["x"]), batch["x"])
    info: dict = {}
    with pytest.warns(DeprecationWarning, match=r"use ArraySharder\(\)\.shard_with_info\("):
        ArraySharder.shard_with_info_static(batch, NamedSharding(MESH, P("data")), info)
    assert info["batch_pre_sharding"]["shapes"] == {"x": (8, 2)}
    assert info["batch_post_sharding"]["shardings"]["x"].spec == P("data")
    with pytest.warns(DeprecationWarning, match=r"use parallel_transform\(\.\.\.\) with the sam"):
        centred = sharder.apply_parallel_transform(
            batch["x"], lambda b: b - b.mean(), MESH, ("batch",)
        )
    np.testing.assert_allclose(np.asarray(centred).sum(axis=1), 0.0)


def test_a_setting_given_twice_or_a_wrong_config_is_refused() -> None:
    with pytest.deprecated_call(), pytest.raises(ValueError, match="drop_remainder was given"):
        JaxProcessSharderModule(JaxProcessSharderConfig(), drop_remainder=False)
    with pytest.deprecated_call(), pytest.raises(ValueError, match="axis rules were given twi"):
        ArraySharder(SharderModuleConfig([("batch", "data")]), axis_rules={"batch": "data"})
    with pytest.raises(TypeError, match="config must be a JaxProcessSharderConfig"):
        JaxProcessSharderModule({"drop_remainder": False})  # type: ignore[arg-type]
    with pytest.deprecated_call(), pytest.raises(TypeError, match="drop_remainder must be Tr"):
        JaxProcessSharderConfig(drop_remainder="no")  # type: ignore[arg-type]
    with pytest.deprecated_call(), pytest.raises(TypeError, match="axis_rules must map logica"):
        SharderModuleConfig(sharding_rules=["batch"])  # type: ignore[list-item]
