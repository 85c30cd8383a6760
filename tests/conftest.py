"""Shared fixtures; the root conftest gives every test 8 simulated CPU devices."""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh


@pytest.fixture(params=["auto", "explicit"])
def mesh_1d(request: pytest.FixtureRequest) -> Mesh:
    """A ('data',) mesh over all 8 devices, with Auto or Explicit axis types."""
    axis_type = AxisType.Auto if request.param == "auto" else AxisType.Explicit
    return Mesh(np.array(jax.devices()), ("data",), axis_types=(axis_type,))


@pytest.fixture(params=["auto", "explicit"])
def mesh_2d(request: pytest.FixtureRequest) -> Mesh:
    """A 4 x 2 ('data', 'model') mesh, with Auto or Explicit axis types."""
    axis_type = AxisType.Auto if request.param == "auto" else AxisType.Explicit
    devices = np.array(jax.devices()).reshape(4, 2)
    return Mesh(devices, ("data", "model"), axis_types=(axis_type, axis_type))
