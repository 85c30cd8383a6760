"""A token store: a folder of Megatron pairs (``shard-00000.bin``/``.idx``, ...) and a
``manifest.json`` naming them in order with their counts, the dtype and the token total.

The manifest is written last, once every shard is complete, so a folder without one is
an interrupted write, never a store. Shard k holds documents ``[k*S, (k+1)*S)`` for the
store's `documents_per_shard` S, so the files follow from the documents alone, whatever
number of processes wrote them.
"""

from __future__ import annotations

import json
import os
from functools import partial
from typing import Any

import numpy as np

from datarax.errors import DocumentFormatError
from datarax.pipeline.documents._megatron import IndexedPair
from datarax.pipeline.documents._storage import (
    is_url,
    isfile,
    join,
    listdir,
    on_threads,
    open_binary,
)

MANIFEST = "manifest.json"
FORMAT = "datarax-sharding token store"
OPEN_THREADS = 16  # shards of a remote store opened at once


def shard_name(number: int) -> str:
    """The name of shard `number`: its files are NAME.bin and NAME.idx.

    Example:
        >>> shard_name(3)
        'shard-00003'
    """
    return f"shard-{number:05d}"


def is_store(path: str) -> bool:
    """Whether `path` (a folder or a URL's prefix) holds a store's manifest."""
    return isfile(join(path, MANIFEST))


def has_shards(path: str) -> bool:
    """Whether the folder `path` holds shard files (of a store, complete or not)."""
    return any(name.startswith("shard-") for name in listdir(path))


def write_manifest(
    folder: str, dtype: np.dtype, per_shard: int, shards: list[dict[str, int]]
) -> None:
    """Writes the manifest of a complete store (to a temporary file, then moved into place)."""
    manifest = {
        "format": FORMAT,
        "version": 1,
        "dtype": np.dtype(dtype).name,
        "documents": sum(shard["documents"] for shard in shards),
        "tokens": sum(shard["tokens"] for shard in shards),
        "documents_per_shard": per_shard,
        "shards": [{"name": shard_name(k), **shard} for k, shard in enumerate(shards)],
    }
    temporary = os.path.join(folder, MANIFEST + ".tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(manifest, file, indent=1)
    os.replace(temporary, os.path.join(folder, MANIFEST))


def _manifest(folder: str) -> dict[str, Any]:
    path = join(folder, MANIFEST)
    try:
        with open_binary(path) as file:
            manifest = json.loads(file.read().decode("utf-8"))
        if manifest.get("format") != FORMAT or manifest.get("version") != 1:
            raise ValueError(f"format {manifest.get('format')!r} version {manifest.get('version')}")
        shards = [
            (str(s["name"]), int(s["documents"]), int(s["tokens"])) for s in manifest["shards"]
        ]
        np.dtype(manifest["dtype"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise DocumentFormatError(
            f"{path} is not the manifest of a token store ({type(error).__name__}: {error}). "
            "Write the store again with write_documents(..., replace=True).",
            path=path,
        ) from None
    manifest["shards"] = shards
    return manifest


def open_store(folder: str, cache_dir: str | None = None) -> list[IndexedPair]:
    """The shards of the store in `folder` (a path or URL), in order, each checked against
    the manifest; the indexes of a remote store are copied into `cache_dir`.

    Raises:
        DocumentFormatError: the manifest is damaged, or a shard is missing or is not
            what the manifest says.
    """
    manifest = _manifest(folder)

    def shard(name: str, documents: int, tokens: int) -> IndexedPair:
        prefix = join(folder, name)
        try:
            pair = IndexedPair(prefix + ".idx", prefix + ".bin", cache_dir=cache_dir)
        except FileNotFoundError:  # which file: asked only now (a request each, remote)
            missing = [prefix + s for s in (".idx", ".bin") if not isfile(prefix + s)]
            if not missing:
                raise
            raise DocumentFormatError(
                f"The store {folder} names shard {name}, but {missing[0]} is missing; "
                "write the store again.",
                path=missing[0],
            ) from None
        held = pair.token_bytes // pair.dtype.itemsize
        if (pair.count, held, pair.dtype.name) != (documents, tokens, manifest["dtype"]):
            raise DocumentFormatError(
                f"Shard {prefix} holds {pair.count} documents and {held} {pair.dtype} tokens, "
                f"but the manifest of {folder} says {documents} and {tokens} "
                f"{manifest['dtype']}: the store was changed after it was written.",
                path=prefix + ".idx",
            )
        return pair

    # A remote shard takes a few requests to open (its stamps, its index): all at once.
    threads = OPEN_THREADS if is_url(folder) else 1
    return on_threads([partial(shard, *entry) for entry in manifest["shards"]], threads)
