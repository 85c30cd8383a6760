"""What each process of a local cluster runs in tests/pipeline/test_store_hosts.py and
test_store_remote.py: a token store written by every process at once (to a folder, or to
a URL), and a pipeline of global batches over it."""

from __future__ import annotations

import itertools
from typing import Any

import fsspec
import jax
import numpy as np
from flax import nnx
from fsspec.implementations.local import LocalFileSystem
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import Documents, Packed, Pipeline, write_documents


def corpus(count: int = 700) -> list[np.ndarray]:
    """The same documents on every process: lengths 0-80, tokens naming their document."""
    lengths = np.random.default_rng(11).integers(0, 81, count)
    return [(1000 * k + np.arange(n)) % 60_000 for k, n in enumerate(lengths.tolist())]


def write(folder: str, documents_per_shard: int = 90) -> int:
    """Writes the corpus as a store at `folder`; returns how many documents it holds."""
    return len(write_documents(corpus(), folder, documents_per_shard=documents_per_shard))


def refused(folder: str, bad_process: int) -> str:
    """A write whose documents hold a token uint16 does not hold in the shards of
    `bad_process` only, with dtype=uint16 given: what each process raised."""
    documents = corpus()
    documents[650] = np.array([70_000])
    try:
        write_documents(documents, folder, dtype=np.uint16, documents_per_shard=90)
    except Exception as error:  # each process says what it raised
        return f"{type(error).__name__}: {error}"
    return "written"


def _pipeline(store: str) -> Pipeline:
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    packed = Packed(Documents(store), 64, rngs=nnx.Rngs(1))
    return Pipeline(source=packed, batch_size=8, shuffle=True, rngs=nnx.Rngs(2), sharding=sharding)


def _gathered(batch: dict[str, jax.Array]) -> list[list[int]]:
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(batch["tokens"], tiled=True)).tolist()


def write_and_read(folder: str, store: str, state: dict[str, Any] | None) -> dict[str, Any]:
    """Writes the corpus at `folder`; then reads global batches over `store`: every batch
    of an epoch, the state after two, and with `state` the batches after resuming there."""
    write(folder)
    tokens = [_gathered(batch) for batch in _pipeline(store)]
    first = _pipeline(store)
    for _ in itertools.islice(iter(first), 2):
        pass
    resumed = None
    if state is not None:
        again = _pipeline(store)
        again.set_state(state)
        resumed = [_gathered(batch) for batch in again]
    return {"tokens": tokens, "state": first.get_state(), "resumed": resumed}


class SharedFolders(LocalFileSystem):
    """``shared:///PATH``: the local folder PATH as an fsspec URL, so that the processes
    of a local cluster write a store to a URL they all see, as hosts see a bucket."""

    protocol = ("shared",)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        text = str(path)
        return super()._strip_protocol(
            text[len("shared://") :] if text.startswith("shared://") else text
        )

    def unstrip_protocol(self, name: str) -> str:
        return "shared://" + self._strip_protocol(name)


def shared_scheme() -> None:
    """Makes ``shared://`` known to fsspec in this process."""
    fsspec.register_implementation("shared", SharedFolders, clobber=True)


def write_to_url(url: str) -> int:
    """Writes the corpus as a store at the URL `url` (``shared://``)."""
    shared_scheme()
    return write(url)


def read_epoch(store: str, cache_dir: str) -> dict[str, Any]:
    """One shuffled epoch of global batches over the store at `store` (a URL): the
    tokens, and how many of them are a document's (not padding)."""
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    packed = Packed(Documents(store, cache_dir=cache_dir), 64, rngs=nnx.Rngs(1))
    pipeline = Pipeline(
        source=packed, batch_size=8, shuffle=True, rngs=nnx.Rngs(2), sharding=sharding
    )
    tokens, real = [], 0
    for batch in pipeline:
        tokens.append(_gathered(batch))
        segments = _gathered({"tokens": batch["segment_ids"]})
        real += int(np.count_nonzero(np.asarray(segments)))
    return {"tokens": tokens, "real": real}
