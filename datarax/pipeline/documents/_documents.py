"""`Documents`: token documents of any length, from files, a token store, a Hugging Face
dataset or a sequence, as read-only 1-D integer arrays, with every document's length
known up front.

Packing and mixing plan from lengths alone, so the lengths are read once, without
turning tokens into Python objects where the format allows (a token store's are mapped
from its index, not read at all), and the documents are read later, by index, as few as
asked for.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from datarax._validate import check_int, check_str
from datarax.errors import DocumentLengthError
from datarax.pipeline.documents._contract import (
    CheckedLengths,
    check_lengths,
    many_indices,
    one_index,
)
from datarax.pipeline.documents._files import (
    FileDocuments,
    FileOptions,
    is_files,
    names_file,
    resolve_paths,
)
from datarax.pipeline.documents._index import default_cache_dir
from datarax.pipeline.documents._storage import is_url, on_threads
from datarax.pipeline.documents._text import (
    TextSequence,
    Tokenizer,
    count_files,
    tokenizing_of,
)
from datarax.pipeline.documents._values import as_document, item_at

READ_THREADS = 16  # a remote file's requests (or a sequence's items) read at once, by default


class _Backend(Protocol):
    @property
    def count(self) -> int: ...

    @property
    def lengths(self) -> np.ndarray: ...

    def read(self, indices: np.ndarray) -> list[np.ndarray]: ...


class SequenceDocuments:
    """The documents of anything with ``__len__`` and ``__getitem__`` (a list, a Grain
    data source), each item 1-D integers or a dict holding them under `field`."""

    def __init__(self, data: Any, field: str, lengths: np.ndarray | None, threads: int = 1):
        if isinstance(data, Mapping):
            raise TypeError(
                f"data is a {type(data).__name__} (keys {list(map(str, data))[:5]}), not a "
                "sequence of documents: pass the column that holds the token ids, e.g. "
                "Documents(data['tokens'])."
            )
        self.data, self.field = data, field
        # In memory, an item is there at once: a thread's hand-off would only slow it.
        self.threads = 1 if isinstance(data, (list, tuple, np.ndarray)) else threads
        if lengths is None:
            lengths = np.fromiter(
                (len(as_document(item_at(data, i), i, field)) for i in range(len(data))),
                np.int64,
                count=len(data),
            )
        self.lengths = check_lengths(lengths, count=len(data))
        self.count = len(self.lengths)

    def read(self, indices: np.ndarray) -> list[np.ndarray]:
        asked = [int(i) for i in indices]
        getitems: Callable[[list[int]], Sequence[Any]] | None = getattr(
            self.data, "__getitems__", None
        )
        if callable(getitems):
            items = list(getitems(asked))
        else:
            items = on_threads([partial(item_at, self.data, i) for i in asked], self.threads)
        return [as_document(item, i, self.field) for item, i in zip(items, asked, strict=True)]


def _are_texts(data: Any) -> bool:
    """Whether `data`, given with a tokenizer, is texts: a list or tuple of str (files
    come as one path or glob, or as ``pathlib.Path`` objects).

    Raises:
        ValueError: its first str is the path or URL of a documents file (its name ends
            as one's does, and it exists or is a URL): a list of paths, mistaken for texts.
    """
    if not (isinstance(data, (list, tuple)) and data and isinstance(data[0], str)):
        return False
    first = data[0]
    if names_file(first) and (is_url(first) or os.path.exists(os.path.expanduser(first))):
        raise ValueError(
            f"data[0] is {first!r}, the path of a file, but with tokenizer= a list of "
            "str is a list of texts. Pass files as one path or glob pattern, or as "
            "pathlib.Path objects: Documents([Path(p) for p in paths], tokenizer=...)."
        )
    return True


def _is_dataset(data: Any) -> bool:
    """Whether `data` is a `datasets.Dataset`, asked only if `datasets` is imported."""
    datasets = sys.modules.get("datasets")
    return datasets is not None and isinstance(data, getattr(datasets, "Dataset", ()))


class Documents(CheckedLengths):
    """Variable-length token documents: ``docs[i]`` is a read-only 1-D integer array and
    ``docs.lengths`` every document's token count, known before any document is read.

    `data` is one of:

    - a token store's folder (written by `write_documents`), a Megatron-LM indexed
      dataset by its prefix (the path to which ``.bin`` and ``.idx`` are appended, as
      Megatron and NeMo name them) or its ``.idx``, or a flat token file: a ``.npy`` file,
      or a raw ``.bin`` given `dtype`, each document ending with (and holding) `eos_id`,
      the tokens after the last one a document too. All three are read without decoding:
      the index is mapped, and a document is one read of its bytes;
    - a Parquet file (``.parquet``: a column `field` of lists of integers; needs the
      ``parquet`` extra) or a JSON Lines file (``.jsonl`` or ``.json``: one JSON object a
      line, its tokens under `field`; blank lines are skipped);
    - a compressed JSON Lines file (``.jsonl.gz``, ``.jsonl.zst``; ``.json`` too; zstd
      needs the ``zstd`` extra), as Dolma and FineWeb ship them: read in order only, so
      its lengths are read and `write_documents` converts it in one pass, but a read by
      position (``docs[i]``, a shuffled `Packed`) is refused: write it as a token store
      first;
    - a glob pattern (its matches sorted; a Megatron pair matched by both of its files
      counts once, and a pattern that matches no file but matches ``PATTERN.idx`` names
      prefixes), or a list of any of these, kinds mixed as you like: documents are
      numbered across the files in the order given;
    - any of these as a URL of an fsspec file system (``gs://``, ``s3://``, ``hf://``,
      ``http(s)://``, ``memory://``; globs too; needs the ``remote`` extra, and gcsfs,
      s3fs or huggingface_hub for their schemes): read by byte range, a request a
      document (a Parquet row group's column chunk a request), never by downloading a
      file; a remote index (a ``.idx``) is copied once a host into `cache_dir` and mapped;
    - a Hugging Face ``datasets.Dataset`` with a column `field` of lists of integers;
    - anything else with ``__len__`` and ``__getitem__`` (a list, a Grain data source)
      whose items are 1-D integer arrays, lists of ints, or dicts holding them under
      `field`.

    Lengths are read once: from a store's or Megatron pair's index by memory map (int32,
    as the index holds them; no process keeps a copy), from the list offsets of Parquet
    row groups and of a dataset's Arrow table (no token becomes a Python object), in one
    pass over a JSON Lines file, a flat token file or a sequence, every document checked.
    Pass `lengths` where you know them and that reading is skipped (not for indexed files,
    whose lengths cost nothing). Indexes that must be computed (lengths, where each
    document lies, the lengths of several indexed files in one array) are cached in
    `cache_dir` under a key of the file's absolute path, size, modification time
    (``st_mtime_ns``) and what else they depend on (`field`, `eos_id`), so a changed file
    is indexed afresh by the next `Documents`; a `Documents` built before the change
    raises `SourceFileChangedError` naming the file when it reads from it. A URL's file is
    known by its size and the version its store gives (generation, ETag or modification
    time), checked when a process first reads it and then at most every 5 seconds (a
    check is a request). An unwritable `cache_dir` only means no cache.

    By one rule, the documents of one read come from remote files, or from a sequence
    other than a list, tuple or array, on `read_threads` threads at once (16, as Grain
    reads: a 10 ms wait a request is then hidden behind the others); local files and
    in-memory sequences are read in the calling thread (a page-cache read is faster than
    handing it to a thread). A remote read that fails for a passing cause (a timeout, a
    dropped connection, a server error) is tried three times, then raised.

    With `tokenizer`, the documents are texts, tokenized as they are read: `field` holds
    the text (a JSON Lines key, a Parquet or dataset string column, a dict's key), or the
    items are texts (a list or tuple of str; files are then given as one path or glob, or
    as ``pathlib.Path`` objects). `tokenizer` is any callable from a str to token ids: a
    Hugging Face ``tokenizers.Tokenizer`` as ``lambda s: tok.encode(s).ids``, tiktoken's
    ``enc.encode``. A list of ints becomes int64, an integer numpy array keeps its dtype,
    and `append_eos` ends each document. The lengths come from one tokenizing pass when
    first asked for: on worker processes, one a core of this host, when the tokenizer
    pickles and there are 4,096 documents or more, else in this process. A callable has
    no identity that outlasts its process, so tokenized lengths are cached on disk only
    under `tokenizer_name` (with the file's key and `append_eos`): change the name when
    the tokenizer changes. `write_documents` tokenizes each document once and needs no
    lengths: to train on a text corpus more than once, tokenize it into a token store.

    Documents keep their dtype: a store's or flat file's, a Parquet column's value type,
    int64 from JSON Lines, the items' own from a sequence (a list of Python ints gives
    int64). Empty documents stay, with length 0 (a packer skips them). Pickled for worker
    processes, a `Documents` over files holds only the paths, options, stamps and cache
    folder (and `lengths` where you passed them; a tokenizer, which must then pickle, and
    the lengths it gave without `tokenizer_name`): a worker maps or opens the files itself.

    Args:
        data: the documents, as above.
        field: the column or key that holds the token ids (Parquet, JSON Lines, datasets,
            dicts).
        lengths: each document's token count, when known; checked against the documents
            when they are read.
        cache_dir: where computed indexes are cached; by default
            ``$XDG_CACHE_HOME/datarax-sharding/documents`` (``~/.cache`` without it).
        eos_id: the end-of-text id that ends each document of a flat token file; needed
            for them, refused for other files.
        dtype: the token dtype of a raw ``.bin`` flat token file; needed for one, refused
            for other files (which say their dtype).
        tokenizer: turns a text into token ids; `field` (or each item) then holds text.
        tokenizer_name: `tokenizer`'s name: the one identity under which tokenized lengths
            are cached on disk (none: they are counted again by each `Documents`).
        append_eos: an end-of-text id (an int in ``[0, 2**31 - 1]``) appended to each
            tokenized document.
        read_threads: how many documents of one read are fetched at once, by the rule
            above.

    Raises:
        DocumentFileNotFoundError: a path or glob pattern names no file; a Megatron prefix
            lacks one of its two files; a folder is no store (or an interrupted one).
        DocumentFormatError: a file is of no kind above, or is not what its kind says (an
            index of another magic, version or dtype code, a ``.bin`` shorter than its
            index, a damaged manifest, a flat file whose dtype is not integers).
        DocumentFieldError: a file or dataset has no column `field`, or it is not a list
            of integers (with `tokenizer`: not a string column); or a record lacks it.
        DocumentError: a document is not 1-D integers (its index named); with
            `tokenizer`, a text is no str, or the tokenizer raised or returned no token ids
            (the document named).
        RemoteReadError: a remote read failed on every try, or the server ignores byte
            ranges (it would send the whole file for each document).
        ImportError: a URL's scheme needs a package that is not installed (named).
        TypeError, ValueError: `data` is none of the above; `lengths` is not a 1-D array
            of non-negative integers, one per document; `eos_id` or `dtype` is missing,
            not wanted, or `eos_id` lies outside the dtype's range; `tokenizer` is not
            callable; `tokenizer_name` or `append_eos` come without it, or `tokenizer` with
            files of token ids.

    Example:
        >>> docs = Documents([[5, 6, 7], np.array([8], np.int32), {"tokens": []}])
        >>> len(docs), docs.lengths
        (3, array([3, 1, 0]))
        >>> docs[1], docs.read([0, 1, 0])[2]
        (array([8], dtype=int32), array([5, 6, 7]))
        >>> text = Documents(["hi", "héllo"], tokenizer=lambda s: list(s.encode()), append_eos=0)
        >>> text.lengths, text[0]
        (array([3, 7]), array([104, 105,   0]))
    """

    def __init__(
        self,
        data: Any,
        *,
        field: str = "tokens",
        lengths: Sequence[int] | np.ndarray | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        eos_id: int | None = None,
        dtype: Any = None,
        read_threads: int = READ_THREADS,
        tokenizer: Tokenizer | None = None,
        tokenizer_name: str | None = None,
        append_eos: int | None = None,
    ):
        check_str("field", field)
        threads = check_int("read_threads", read_threads, minimum=1)
        self.field = field
        given = None if lengths is None else check_lengths(lengths)
        folder = default_cache_dir() if cache_dir is None else os.fspath(cache_dir)
        self.cache_dir = os.path.abspath(os.path.expanduser(folder))
        self._backend: _Backend
        self._text = tokenizing_of(tokenizer, tokenizer_name, append_eos)
        if is_files(data) and not (self._text is not None and _are_texts(data)):
            options = FileOptions(field, self.cache_dir, dtype, eos_id, text=self._text)
            found = resolve_paths(data, raw=dtype is not None)
            self._backend = FileDocuments(found, options, given, threads)
            return
        if eos_id is not None or dtype is not None:
            raise ValueError(
                "eos_id= and dtype= are for flat token files (.npy, raw .bin); the documents "
                f"here are a {type(data).__name__}: leave them out."
            )
        sized = hasattr(data, "__len__") and hasattr(data, "__getitem__")
        if self._text is not None and (_is_dataset(data) or sized):
            dataset = _is_dataset(data)
            self._backend = TextSequence(data, field, self._text, given, dataset, threads)
        elif _is_dataset(data):
            from datarax.pipeline.documents._arrow import DatasetDocuments

            self._backend = DatasetDocuments(data, field, given)
        elif sized:
            self._backend = SequenceDocuments(data, field, given, threads)
        else:
            raise TypeError(
                f"data must be a documents file or token store (a path), a glob pattern, a "
                f"list of them, a datasets.Dataset, or a sequence of token arrays, got "
                f"{type(data).__name__}."
            )

    def __len__(self) -> int:
        return self._backend.count

    @property
    def lengths(self) -> np.ndarray:
        """Every document's token count: one integer entry per document (int64, or int32
        mapped from an index of Megatron's format), read-only."""
        backend = self._backend
        if self._text and isinstance(backend, FileDocuments) and not backend.has_lengths:
            count_files(backend.parts)  # every file's texts in one pass
        return self._backend.lengths

    def __getitem__(self, index: int) -> np.ndarray:
        """Document `index` (negative counts from the end).

        Raises:
            TypeError: `index` is not an int.
            IndexError: `index` is out of range.
        """
        return self.read([one_index(index, len(self), "documents")])[0]

    def read(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Documents `indices`, in the order asked, repeats included: each file's
        documents read together (a Parquet row group decoded once for all it holds).

        Raises:
            TypeError: `indices` is not a 1-D sequence of ints.
            IndexError: an index is out of range.
            DocumentError: a document is not 1-D integers, or its length differs from
                its entry in `lengths`.
            SourceFileChangedError: a file changed since this `Documents` was built.

        Example:
            >>> Documents([[1, 2], [3], [4, 5, 6]]).read(np.array([2, -3]))
            [array([4, 5, 6]), array([1, 2])]
        """
        asked = many_indices(indices, len(self), "documents")
        documents = self._backend.read(asked)
        counts = np.fromiter(map(len, documents), np.int64, count=len(documents))
        odd = np.flatnonzero(counts != self.lengths[asked])
        if odd.size:
            index = int(asked[odd[0]])
            raise _length_error(index, int(counts[odd[0]]), int(self.lengths[index]))
        return documents

    def read_pieces(
        self,
        indices: Sequence[int] | np.ndarray,
        starts: Sequence[int] | np.ndarray,
        sizes: Sequence[int] | np.ndarray,
    ) -> list[np.ndarray]:
        """Tokens ``[start, start + size)`` of each document `indices`: what `Packed` reads
        for a row. A token store, a Megatron pair or a flat token file fetches only those
        bytes (a long document cut over many rows is fetched once over the epoch, not once
        a row); other documents are read whole and cut.

        Raises:
            TypeError: `indices`, `starts` or `sizes` are not 1-D sequences of ints.
            IndexError: an index is out of range.
            ValueError: a piece does not lie inside its document, or the three differ in
                length.

        Example:
            >>> Documents([[1, 2, 3, 4], [5, 6]]).read_pieces([0, 1], [1, 0], [2, 1])
            [array([2, 3]), array([5])]
        """
        asked = many_indices(indices, len(self), "documents")
        first = many_indices(starts, 2**62, "piece starts")
        size = many_indices(sizes, 2**62, "piece sizes")
        if not len(asked) == len(first) == len(size):
            raise ValueError(
                f"indices, starts and sizes must have one entry a piece, got {len(asked)}, "
                f"{len(first)} and {len(size)}."
            )
        outside = np.flatnonzero(first + size > self.lengths[asked])
        if outside.size:
            k = int(outside[0])
            raise ValueError(
                f"The piece [{first[k]}, {first[k] + size[k]}) of document {asked[k]} is not "
                f"inside its {self.lengths[asked[k]]} tokens."
            )
        if isinstance(self._backend, FileDocuments):
            pieces = self._backend.read(asked, (first, size))
            short = [k for k, piece in enumerate(pieces) if len(piece) != size[k]]
            if short:
                k = short[0]
                raise _length_error(
                    int(asked[k]), int(first[k]) + len(pieces[k]), int(first[k] + size[k])
                )
            return pieces
        whole = self.read(asked)
        return [d[a : a + n] for d, a, n in zip(whole, first.tolist(), size.tolist(), strict=True)]

    def _stream(self, start: int, stop: int, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` in order, as (tokens back to back, lengths), at most
        `chunk` documents at a time (files: a Parquet row group at a time), each checked
        against `lengths` where they are known; files whose lengths are not read yet are
        not read twice for them.

        Raises:
            DocumentError: a document's length differs from its entry in `lengths`.
        """
        stream: Any = getattr(self._backend, "stream", None)
        if stream is None:
            yield from _read_in_order(self, start, stop, chunk)
            return
        known = self._lengths_known  # files: lengths not read yet are read here
        at = start
        for tokens, counts in stream(start, stop, chunk):
            expected = self.lengths[at : at + len(counts)] if known else counts
            odd = np.flatnonzero(counts != expected)
            if odd.size:
                k = int(odd[0])
                raise _length_error(at + k, int(counts[k]), int(expected[k]))
            at += len(counts)
            yield tokens, counts

    @property
    def _lengths_known(self) -> bool:
        """Whether `lengths` are known without a pass over the documents."""
        return getattr(self._backend, "has_lengths", True)

    def _plan_home(self) -> tuple[str, list[str]] | None:
        """Where `Packed` keeps plans of these documents (see `FileDocuments.plan_home`)."""
        home: Any = getattr(self._backend, "plan_home", None)
        found = home() if home is not None else None
        if found is None or self._text is None:
            return found
        if self._text.name is None:
            return None  # lengths of a tokenizer without a name are never kept on disk
        return f"{found[0]}\0tokenizer\0{self._text.key}", found[1]

    @property
    def _pickles(self) -> bool:
        """Whether these documents pickle, for worker processes (a tokenizer may not)."""
        return self._text is None or self._text.pickles()

    def __repr__(self) -> str:
        return f"Documents({len(self)} documents, field={self.field!r})"


def _read_in_order(
    documents: Any, start: int, stop: int, chunk: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Documents ``[start, stop)`` of any documents source, `chunk` at a time, in order."""
    for at in range(start, stop, chunk):
        read = documents.read(np.arange(at, min(at + chunk, stop)))
        tokens = np.concatenate(read) if read else np.zeros(0, np.int64)
        yield tokens, np.fromiter(map(len, read), np.int64, len(read))


def _length_error(index: int, count: int, expected: int) -> DocumentLengthError:
    return DocumentLengthError(
        f"document {index} has {count} tokens, but lengths[{index}] is {expected}. The "
        "lengths passed must be the documents' own; leave lengths=None to read them.",
        index=index,
        length=count,
        expected=expected,
    )
