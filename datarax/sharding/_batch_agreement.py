"""Whether the hosts' parts of a batch make one global batch: what the hosts compare,
and the errors when they disagree.

Every host sends the others one message for each batch they check: its structure and
sharding, and per leaf its dtype, local and global shape, the error it found (pickled,
so that every host raises it whole, type and fields) and digests of the blocks it holds
with other hosts. `check_agreement` compares them in the same order on every host, so
every host raises the same error, a `HostMismatchError` naming what differs, the values
and the processes at odds.
"""

from __future__ import annotations

import base64
import hashlib
import pickle
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding

from datarax._exchange import at_odds
from datarax.errors import HostMismatchError
from datarax.sharding._sharding_checks import describe_axes, spec_axis_names

_FIX = (
    "Every process must pass exactly the part of the batch its devices hold under the "
    "sharding: take it with JaxProcessSharder().shard_data(data, sharding=sharding) from "
    "the same global batch on every host."
)


def digest(data: Any, region: tuple[slice, ...]) -> str:
    """A digest of the part `region` of `data`, for comparing replicas across hosts."""
    part = np.ascontiguousarray(np.asarray(data)[region])
    return hashlib.sha1(part.reshape(-1).view(np.uint8).data, usedforsecurity=False).hexdigest()


def _spanning_axes(sharding: Sharding, rank: int) -> list[str]:
    """The mesh axes that replicate a rank-`rank` leaf across hosts."""
    if not isinstance(sharding, NamedSharding):
        return []
    used = {name for entry in tuple(sharding.spec)[:rank] for name in spec_axis_names(entry)}
    hosts = np.vectorize(lambda device: device.process_index)(sharding.mesh.devices)
    return [
        name
        for axis, name in enumerate(sharding.mesh.axis_names)
        if name not in used and (hosts != hosts.take([0], axis=axis)).any()
    ]


def _listed(values: list[Any]) -> str:
    return ", ".join(f"{v} on process {p}" for p, v in enumerate(values))


def _raise_found_error(entries: list[dict[str, Any]]) -> None:
    """Raises, on every host, the error the first process that found one found."""
    for process, entry in enumerate(entries):
        if entry["error"] is not None:
            error = pickle.loads(base64.b64decode(entry["error"]))
            if process != jax.process_index() and error.args:
                error.args = (f"On process {process}: {error.args[0]}", *error.args[1:])
            raise error


def pickled(error: Exception) -> str:
    """`error` as text for the exchange; `_raise_found_error` raises it again whole."""
    return base64.b64encode(pickle.dumps(error)).decode("ascii")


def _check_leaf(position: int, name: str, sharding: Sharding, messages: list[Any]) -> None:
    entries = [m["leaves"][position] for m in messages]
    _raise_found_error(entries)
    dtypes = [entry["dtype"] for entry in entries]
    if len(set(dtypes)) > 1:
        raise HostMismatchError(
            f"Hosts disagree on the dtype of {name}: {_listed(dtypes)}. {_FIX}",
            what="dtype",
            values=dtypes,
            processes=at_odds(dtypes),
            leaf=name,
        )
    made = [None if e["global"] is None else tuple(e["global"]) for e in entries]
    sizes = {shape for shape in made if shape is not None}
    if len(sizes) > 1:
        each = _listed(
            [
                f"shape {tuple(e['local'])}, "
                + (f"making {shape}" if shape is not None else "holding none")
                for e, shape in zip(entries, made, strict=True)
            ]
        )
        raise HostMismatchError(
            f"Hosts passed row counts of {name} that make different global arrays "
            f"under this sharding: {each}. {_FIX}",
            what="global shape",
            values=made,
            processes=at_odds(made),
            leaf=name,
        )
    digests: dict[str, dict[int, str]] = {}
    for process, message in enumerate(messages):
        for key, digest in message["digests"][position].items():
            digests.setdefault(key, {})[process] = digest
    for key, by_process in sorted(digests.items()):
        if len(set(by_process.values())) > 1:
            shape = next(iter(sizes))
            axes = _spanning_axes(sharding, len(shape))
            across = f" ({describe_axes(axes)} spans them)" if axes else ""
            if shape:
                start, stop = (int(n) for n in key.split(",")[0].split(":"))
                part = (
                    f"rows {start}-{stop - 1} of {name} (of the {shape[0]}-row global "
                    "batch their row counts make)"
                )
            else:
                part = f"{name} (a 0-d leaf, replicated on every device)"
            values = [by_process.get(process) for process in range(len(messages))]
            raise HostMismatchError(
                f"Processes {sorted(by_process)} all hold {part} under this sharding{across}, "
                f"but passed different data for it. {_FIX}",
                what="replicated data",
                values=values,
                processes=at_odds(values),
                leaf=name,
            )


def check_agreement(messages: list[dict[str, Any]], leaves: Sequence[tuple[str, Sharding]]) -> None:
    """Raises the same error on every host when the hosts' messages disagree.

    `messages` are every process's, in process order (see `make_global`'s `_agree`);
    `leaves` names each leaf and gives its sharding, in leaf order.

    Raises:
        HostMismatchError: the hosts passed different structures, shardings, dtypes,
            global shapes, or different data where they hold the same part.
        TypeError, ValueError: the error a host found in its part, raised whole.
    """
    for field, what in (("tree", "structure"), ("sharding", "shardings")):
        values = [m[field] for m in messages]
        if len(set(values)) > 1:
            raise HostMismatchError(
                f"Hosts passed batches of different {what}: {_listed(values)}. {_FIX}",
                what=what,
                values=values,
                processes=at_odds(values),
            )
    for position, (name, sharding) in enumerate(leaves):
        _check_leaf(position, name, sharding, messages)
