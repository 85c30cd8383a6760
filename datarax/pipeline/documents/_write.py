"""`write_documents`: any documents written once as a token store, on every core and every
host at once, the same store whatever the number of processes."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any, cast

import jax
import numpy as np

from datarax._exchange import exchange
from datarax._validate import check_int
from datarax.errors import HostMismatchError, StoreWriteError
from datarax.pipeline.documents import _storage as storage
from datarax.pipeline.documents._contract import CheckedLengths
from datarax.pipeline.documents._documents import Documents, _read_in_order
from datarax.pipeline.documents._files import FileDocuments
from datarax.pipeline.documents._megatron import PairWriter, token_dtype, widen
from datarax.pipeline.documents._store import MANIFEST, is_store, shard_name, write_manifest
from datarax.pipeline.workers import leave_if_importing_main, usable_cores

_CHUNK_TOKENS = 1 << 23  # tokens read and written at a time, at most (one document more)
_CHUNK_DOCUMENTS = 1 << 12  # documents read at a time, at most
_NARROW, _WIDE = np.dtype(np.uint16), np.dtype(np.int32)
_WAIT_S = 7 * 24 * 3600.0  # how long a process waits for the others to finish their shards
WRITING, REPLACED = ".writing", ".replaced"


def _fitted(
    tokens: np.ndarray, first: int, lengths: np.ndarray, given: np.dtype | None, now: np.dtype
) -> np.dtype:
    """The dtype a shard written in `now` needs for `tokens` (of documents from `first` on):
    `given` where the caller gave one, else uint16 while every token is below 65,536,
    then int32.

    Raises:
        ValueError: a token does not fit `given` (or int32, with none given).
    """
    if not tokens.size:
        return now
    low, high = int(tokens.min()), int(tokens.max())
    target = given or (now if now == _WIDE or (low >= 0 and high <= 65_535) else _WIDE)
    limits = np.iinfo(target)
    if limits.min <= low and high <= limits.max:
        return target
    bad = int(np.flatnonzero((tokens < limits.min) | (tokens > limits.max))[0])
    document = first + int(np.searchsorted(np.cumsum(lengths), bad, side="right"))
    advice = "pass a wider dtype" if given else "pass dtype=np.int64"
    raise ValueError(
        f"Document {document} holds token {int(tokens[bad])}, which {target} does not hold "
        f"({limits.min}..{limits.max}): {advice}. Nothing was written."
    )


def _chunks(documents: Any, start: int, stop: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first document, tokens back to back, lengths) of documents ``[start, stop)``, in
    chunks of about `_CHUNK_TOKENS` tokens where the lengths are known (a Parquet file's
    a row group at a time), else of `_CHUNK_DOCUMENTS` documents."""
    chunk = _CHUNK_DOCUMENTS
    if getattr(documents, "_lengths_known", True) and stop > start:
        tokens = int(np.sum(documents.lengths[start:stop], dtype=np.int64))
        chunk = int(min(chunk, max(1, (stop - start) * _CHUNK_TOKENS // max(tokens, 1))))
    stream: Any = getattr(documents, "_stream", None)
    parts = (
        stream(start, stop, chunk)
        if stream is not None
        else _read_in_order(documents, start, stop, chunk)
    )
    at = start
    for tokens_, counts in parts:
        yield at, tokens_, counts
        at += len(counts)


def write_shard(
    documents: Any, folder: str, shard: int, span: tuple[int, int], given: np.dtype | None
) -> dict[str, Any]:
    """Writes documents ``span`` as shard `shard` of the store being written in `folder`."""
    prefix = os.path.join(folder, shard_name(shard))
    writer = PairWriter(prefix, given or _NARROW)
    tokens_written = 0
    try:
        for first, tokens, lengths in _chunks(documents, *span):
            needed = _fitted(tokens, first, lengths, given, writer.dtype)
            if needed != writer.dtype:
                writer.widen(needed)
            writer.add(tokens, lengths)
            tokens_written += int(lengths.sum())
        writer.close()
    except BaseException:
        writer.abandon()
        raise
    return {
        "shard": shard,
        "documents": span[1] - span[0],
        "tokens": tokens_written,
        "dtype": writer.dtype.name,
    }


def _prepare(path: str, replace: bool) -> None:
    """Checks that `path` may take the store, and starts `path` + WRITING afresh.

    Raises:
        FileExistsError: `path` is a file, holds other files, or holds a store and
            `replace` is False.
    """
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"{path} is a file; write_documents writes a store's folder.")
    entries = sorted(os.listdir(path)) if os.path.isdir(path) else []
    if entries and not is_store(path):
        raise FileExistsError(
            f"{path} holds files that are not a token store ({', '.join(entries[:3])}); "
            "write the store to a new or empty folder."
        )
    if entries and not replace:
        raise FileExistsError(f"{path} holds a token store; pass replace=True to write over it.")
    shutil.rmtree(path + WRITING, ignore_errors=True)  # an interrupted write: start over
    os.makedirs(path + WRITING)


def _prepare_remote(url: str, replace: bool) -> None:
    """Checks that the URL `url` may take the store; with `replace`, removes the store (or
    the shards of an interrupted write) there, its manifest first.

    Raises:
        FileExistsError: `url` is a file, holds other files, or holds a store (or shards)
            and `replace` is False.
    """
    if storage.isfile(url):
        raise FileExistsError(f"{url} is a file; write_documents writes a store's folder.")
    entries = sorted(storage.listdir(url)) if storage.isdir(url) else []
    others = [name for name in entries if name != MANIFEST and not name.startswith("shard-")]
    if others:
        raise FileExistsError(
            f"{url} holds files that are not a token store ({', '.join(others[:3])}); "
            "write the store to a new or empty folder."
        )
    if entries and not replace:
        raise FileExistsError(
            f"{url} holds a token store (or the shards of one cut short); pass replace=True "
            "to write over it."
        )
    fs = storage.filesystem(url)
    for name in sorted(entries, key=lambda name: name != MANIFEST):  # the manifest first
        fs.rm_file(storage.join(url, name))
    fs.makedirs(url, exist_ok=True)  # a folder where the file system has them


def _upload(writing: str, url: str, shards: list[int]) -> None:
    """Copies the files of `shards` from the local folder `writing` to the URL `url`."""
    for shard in shards:
        for suffix in (".bin", ".idx"):
            name = shard_name(shard) + suffix
            _upload_file(os.path.join(writing, name), storage.join(url, name))


def _upload_file(local: str, url: str) -> None:
    storage.filesystem(url).put_file(local, url)


def _publish_remote(
    url: str, results: list[dict[str, Any]], dtype: np.dtype, per_shard: int
) -> None:
    """Writes the manifest at the URL `url` once every shard is there."""
    for result in results:
        for suffix in (".bin", ".idx"):
            name = shard_name(result["shard"]) + suffix
            if not storage.isfile(storage.join(url, name)):
                raise FileNotFoundError(f"{url} lacks {name}, which its process uploaded.")
    shards = [{"documents": r["documents"], "tokens": r["tokens"]} for r in results]
    local = tempfile.mkdtemp(prefix="datarax-manifest-")
    try:
        write_manifest(local, dtype, per_shard, shards)
        _upload_file(os.path.join(local, MANIFEST), storage.join(url, MANIFEST))
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _publish(path: str, results: list[dict[str, Any]], dtype: np.dtype, per_shard: int) -> None:
    """Writes the manifest once every shard is there, and moves the store into `path`."""
    writing = path + WRITING
    for result in results:
        prefix = os.path.join(writing, shard_name(result["shard"]))
        if not (os.path.isfile(prefix + ".bin") and os.path.isfile(prefix + ".idx")):
            raise FileNotFoundError(
                f"{prefix}.bin or .idx is missing where its process wrote it: on a cluster, "
                "the store's folder must be on a file system every host shares."
            )
    shards = [{"documents": r["documents"], "tokens": r["tokens"]} for r in results]
    write_manifest(writing, dtype, per_shard, shards)
    if os.path.lexists(path):  # an empty folder, or the store replaced
        shutil.rmtree(path + REPLACED, ignore_errors=True)
        os.rename(path, path + REPLACED)
    os.rename(writing, path)
    shutil.rmtree(path + REPLACED, ignore_errors=True)


def _together(
    what: str, action: Any, *, everyone: bool = True, timeout_s: float = 120.0
) -> list[Any]:
    """`action()` on every process (or process 0 alone), its value gathered from all; a
    failure anywhere is raised on every process: its own error where it failed, a
    `StoreWriteError` naming that process elsewhere."""
    count, me = jax.process_count(), jax.process_index()
    error: Exception | None = None
    value = None
    if everyone or me == 0:
        try:
            value = action()
        except Exception as caught:  # reported to every process, then raised here
            error = caught
    text = json.dumps({"error": f"{type(error).__name__}: {error}"} if error else {"value": value})
    outcomes = [
        json.loads(t)
        for t in (exchange(text, f"write_documents ({what})", timeout_s) if count > 1 else [text])
    ]
    failed = [process for process, outcome in enumerate(outcomes) if "error" in outcome]
    if error is not None:
        raise error
    if failed:
        raise StoreWriteError(
            f"write_documents failed on process {failed[0]} while {what}: "
            f"{outcomes[failed[0]]['error']}. No store was written.",
            process=failed[0],
        )
    return [outcome["value"] for outcome in outcomes]


def _write_mine(
    documents: Any,
    writing: str,
    spans: list[tuple[int, int, int]],
    given: np.dtype | None,
    workers: int,
) -> list[dict[str, Any]]:
    """This process's shards (number, first, stop), on `workers` processes (0: here)."""
    if workers == 0 or len(spans) <= 1:
        return [write_shard(documents, writing, s, (a, b), given) for s, a, b in spans]
    from datarax.pipeline.workers import task_pool

    pool = task_pool(min(workers, len(spans)))
    try:
        futures = [
            pool.submit(write_shard, documents, writing, s, (a, b), given) for s, a, b in spans
        ]
        return [future.result() for future in futures]
    except concurrent.futures.process.BrokenProcessPool as error:
        raise RuntimeError(
            "A process writing the store's shards died (out of memory, killed, or a script "
            'without `if __name__ == "__main__":` around its code, which every worker runs '
            "again on starting)."
        ) from error
    finally:
        pool.shutdown(cancel_futures=True)


def write_documents(
    documents: Any,
    path: str | os.PathLike[str],
    *,
    dtype: Any = None,
    replace: bool = False,
    documents_per_shard: int = 1 << 16,
    workers: int | None = None,
) -> Documents:
    """Writes `documents` as a token store at `path` and returns it as `Documents`.

    The store is a folder of shards in Megatron-LM's indexed format (``shard-00000.bin``
    of raw tokens and ``shard-00000.idx`` of lengths and byte offsets, one sequence a
    document: each pair readable by Megatron's own reader) and a ``manifest.json`` naming
    the shards in order with their counts, the dtype and the token total. Shard k holds
    documents ``[k*S, (k+1)*S)`` for S = `documents_per_shard`, so the store follows from
    the documents alone. Read back (`Documents(path)`), its index is mapped and a
    document is one read of its bytes, nothing decoded, so a shuffled read needs no
    cache of decoded groups, and no process holds its lengths or its packing plans.

    The documents are read once, in order, in chunks of at most 4,096 documents or about
    8 million tokens (a Parquet file's a row group at a time), so memory stays bounded
    whatever the corpus size; from Parquet or JSON Lines files (compressed too) whose
    lengths were not read yet, that one pass is all (the lengths come with the tokens),
    and text read with a tokenizer is tokenized once, in that pass. By one rule, a
    `Documents` over files (with a tokenizer that pickles, if any) is written on as many
    worker processes as this host has cores
    and the store has shards (`workers` sets the count; each opens the files by path),
    anything else in this process; a process's first workers start a forkserver (about a
    second on 2 cores, 3.5 on a TPU v5e host), more than a small corpus takes to write.
    On a JAX cluster (``jax.process_count() > 1``), every process must call this with the
    same documents and arguments, and a `path` all of them share: each writes the shards
    of its contiguous share of the documents, and process 0 writes the manifest once all
    have finished, so the store is the same, file for file, whatever the number of
    processes; a failure on any process is raised on all of them.

    `path` may be a URL (``gs://bucket/store``, any fsspec file system that can write,
    ``memory://`` too): each process writes its shards in a local temporary folder and
    uploads them, and process 0 uploads the manifest last, once every shard is there. A
    store being written has no manifest, so it is never read half-written; but an object
    store has no folder to move into place, so `replace` removes the old store (its
    manifest first) before the new shards are uploaded, and an interrupted write leaves
    shards without a manifest, which a rerun with ``replace=True`` removes.

    `dtype` None stores uint16 while every token is below 65,536 and int32 otherwise
    (the shards written narrower are widened at the end); a token that does not fit the
    dtype (given, or int32) is an error. A store is complete or absent: it is written in
    ``PATH.writing`` and moved to `path` only once its manifest is written, so an
    interrupted write leaves `path` as it was and a rerun starts over (removing
    ``PATH.writing``); an error removes ``PATH.writing``.

    Args:
        documents: a `Documents`, a `Mixture`, or a sequence of 1-D integer arrays (read
            once for its lengths, then to be written).
        path: the store's folder (a path or a URL): new, empty, or (with `replace`)
            holding a store.
        dtype: the tokens' dtype: uint8, int8, int16, uint16, int32 or int64; None
            chooses as above.
        replace: write over the store at `path` (only a store: other files are refused).
        documents_per_shard: documents a shard holds (the last holds the rest); a shard is
            what one process writes, so there are as many to share as shards.
        workers: processes writing this host's shards at once; None: the rule above.

    Returns:
        The store, as ``Documents(path)``.

    Raises:
        FileExistsError: `path` is a file, holds other files, or holds a store without
            `replace`.
        ValueError: a token does not fit the dtype (its document named); a bad argument.
        DocumentError: a document is not 1-D integers (its index named).
        HostMismatchError: the processes passed different documents or arguments.
        StoreWriteError: the write failed on another process.

    Example:
        >>> import tempfile
        >>> folder = os.path.join(tempfile.mkdtemp(), "store")
        >>> store = write_documents([np.array([5, 6, 7]), np.array([8])], folder)
        >>> store.lengths, store[0]
        (array([3, 1], dtype=int32), array([5, 6, 7], dtype=uint16))
        >>> sorted(os.listdir(folder))
        ['manifest.json', 'shard-00000.bin', 'shard-00000.idx']
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a folder's path (a str), got {type(path).__name__}.")
    given = None if dtype is None else token_dtype(dtype)
    if not isinstance(replace, bool):
        raise TypeError(f"replace must be True or False, got {replace!r}.")
    per_shard = check_int("documents_per_shard", documents_per_shard, minimum=1)
    if workers is not None:
        check_int("workers", workers, minimum=0)
    if not isinstance(documents, CheckedLengths):
        documents = Documents(documents)
    documents = cast(Any, documents)
    pickles = getattr(documents, "_pickles", True)  # a lambda tokenizer does not
    if workers is None:
        on_files = isinstance(getattr(documents, "_backend", None), FileDocuments)
        workers = usable_cores() if on_files and pickles else 0
    elif workers and not pickles:
        raise TypeError(
            f"workers={workers} writes on worker processes, and the documents' tokenizer does "
            "not pickle (a lambda or a local function): pass a function defined at a "
            "module's top level (or a functools.partial of one), or workers=0."
        )
    leave_if_importing_main("calls write_documents, whose work its parent process does")
    target = storage.absolute(os.fspath(path))
    remote = storage.is_url(target)
    count, processes, me = len(documents), jax.process_count(), jax.process_index()
    shards = -(-count // per_shard)
    mine = [s for s in range(shards) if s * processes // shards == me] if shards else []
    spans = [(s, s * per_shard, min(count, (s + 1) * per_shard)) for s in mine]
    arguments = json.dumps([count, per_shard, None if given is None else given.name, replace])
    agreed = _together("agreeing on the arguments", lambda: arguments)
    if len(set(agreed)) > 1:
        listed = "; ".join(f"process {p}: {a}" for p, a in enumerate(agreed))
        raise HostMismatchError(
            "write_documents was called with different documents or arguments (count, "
            f"documents_per_shard, dtype, replace) on the processes: {listed}.",
            what="write_documents arguments",
            values=agreed,
            processes=tuple(p for p, a in enumerate(agreed) if a != agreed[0]),
        )
    prepare = _prepare_remote if remote else _prepare
    _together("preparing the folder", lambda: prepare(target, replace), everyone=False)
    # A URL's shards are written in a local folder of each process, then uploaded.
    writing = tempfile.mkdtemp(prefix="datarax-store-") if remote else target + WRITING
    try:
        written = _together(
            "writing its shards",
            lambda: _write_mine(documents, writing, spans, given, workers),
            timeout_s=_WAIT_S,
        )
        results = sorted((r for part in written for r in part), key=lambda r: r["shard"])
        store_dtype = given or max(
            (np.dtype(r["dtype"]) for r in results), key=lambda d: d.itemsize, default=_NARROW
        )

        def widen_mine() -> None:
            for result in results:
                if result["shard"] in mine and np.dtype(result["dtype"]) != store_dtype:
                    widen(os.path.join(writing, shard_name(result["shard"])), store_dtype)
            if remote:
                _upload(writing, target, mine)

        step = "widening and uploading its shards" if remote else "widening its shards"
        _together(step, widen_mine, timeout_s=_WAIT_S)
        publish = _publish_remote if remote else _publish
        _together(
            "publishing the store",
            lambda: publish(target, results, store_dtype, per_shard),
            everyone=False,
        )
    except BaseException:
        if me == 0 and not remote:
            shutil.rmtree(writing, ignore_errors=True)
        raise
    finally:
        if remote:
            shutil.rmtree(writing, ignore_errors=True)
    return Documents(target)
