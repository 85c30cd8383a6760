"""Shared fixtures; the root conftest gives every test 8 simulated CPU devices.

`tests/` goes on ``sys.path`` here, once for every folder below it, so that test files
import what they share from `tests/_support` as ``_support.<module>``.
"""

import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)


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
