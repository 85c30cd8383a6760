"""Every test and doctest sees 8 simulated CPU devices."""

import jax

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import datarax  # noqa: E402
from datarax.pipeline import Checkpoints, Documents, Mixture, Packed, Pipeline  # noqa: E402
from datarax.sharding import (  # noqa: E402
    ArraySharder,
    JaxProcessSharder,
    JaxProcessSharderModule,
    pad_to_multiple,
)


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict) -> None:
    doctest_namespace.update(
        jax=jax,
        np=np,
        nnx=nnx,
        P=P,
        NamedSharding=NamedSharding,
        datarax=datarax,
        ArraySharder=ArraySharder,
        JaxProcessSharder=JaxProcessSharder,
        JaxProcessSharderModule=JaxProcessSharderModule,
        pad_to_multiple=pad_to_multiple,
        Pipeline=Pipeline,
        Checkpoints=Checkpoints,
        Documents=Documents,
        Mixture=Mixture,
        Packed=Packed,
    )
