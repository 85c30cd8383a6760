"""The errors datarax raises on purpose, by type, with the fields callers need.

Every class here also subclasses the built-in exception that the same check raises
(`ValueError`, `TypeError`, `RuntimeError`, `OSError`), so ``except ValueError`` keeps
working, and all of them subclass `DataraxError`. Catch them by type and read their
fields (the leaf, the stage, the process); the message is for people and may change.

Each error survives pickling with its fields and notes, so one raised in a pipeline
worker or a cluster process reaches the caller whole.

Example:
    >>> from datarax.errors import LeafShapeError
    >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    >>> try:
    ...     ArraySharder().shard({"label": np.arange(10)}, NamedSharding(mesh, P("data")))
    ... except LeafShapeError as error:
    ...     print(error.leaf, error.shape, error.axes, error.parts)
    batch['label'] (10,) ('data',) 8
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _rebuilt(kind: type[BaseException], args: tuple[Any, ...], fields: dict[str, Any]) -> Any:
    error = kind.__new__(kind, *args)
    error.args = args
    error.__dict__.update(fields)
    return error


class DataraxError(Exception):
    """The base of every error datarax raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickles only args, and would call __init__ without the fields.
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


# Placement: leaves, shardings, hosts.


class LeafTypeError(DataraxError, TypeError):
    """A leaf cannot become a `jax.Array` (text, an object, a dtype the devices lack, a
    deleted array, a container `jax.tree_util` does not know).

    Attributes:
        leaf: the leaf's name, e.g. ``batch['label']``.
    """

    def __init__(self, message: str, *, leaf: str):
        super().__init__(message)
        self.leaf = leaf


class LeafValueError(DataraxError, ValueError):
    """A leaf holds a value that cannot become a `jax.Array` (a python int too large for
    JAX's integer type, a scalar where rows are needed).

    Attributes:
        leaf: the leaf's name, e.g. ``batch['label']``.
    """

    def __init__(self, message: str, *, leaf: str):
        super().__init__(message)
        self.leaf = leaf


class LeafShapeError(DataraxError, ValueError):
    """A leaf's shape does not fit the sharding: too many spec entries for its rank, or a
    dimension that does not split evenly over the mesh axes sharding it.

    Attributes:
        leaf: the leaf's name, e.g. ``batch['label']``.
        shape: the leaf's shape.
        dim: the dimension that does not fit.
        axes: the mesh axes that dimension is split over (empty for a rank error).
        parts: how many equal parts those axes need (0 for a rank error).
    """

    def __init__(
        self,
        message: str,
        *,
        leaf: str,
        shape: tuple[int, ...],
        dim: int,
        axes: tuple[str, ...] = (),
        parts: int = 0,
    ):
        super().__init__(message)
        self.leaf, self.shape, self.dim, self.axes, self.parts = leaf, shape, dim, axes, parts


class RowCountError(DataraxError, ValueError):
    """The leaves of one batch or source differ in their number of rows.

    Attributes:
        rows: each leaf's name and row count.
    """

    def __init__(self, message: str, *, rows: Mapping[str, int]):
        super().__init__(message)
        self.rows = dict(rows)


class MeshError(DataraxError, ValueError):
    """A sharding cannot be used: its spec names an axis the mesh lacks or one twice, its
    mesh lists a device twice, or it uses devices no started backend lists."""


class HostMismatchError(DataraxError, ValueError):
    """The hosts passed what cannot make one global batch or one pipeline: different
    structures, dtypes, row counts, replicated data, pipeline states or settings.

    Raised with the same message on every host.

    Attributes:
        what: what they disagree on, e.g. ``"dtype"`` or ``"the pipeline's state"``.
        values: each process's value, in process order.
        processes: the processes at odds (those whose values differ from the others').
        leaf: the leaf concerned, when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        what: str,
        values: Sequence[Any] = (),
        processes: Sequence[int] = (),
        leaf: str | None = None,
    ):
        super().__init__(message)
        self.what, self.values, self.leaf = what, list(values), leaf
        self.processes = tuple(processes)


class ExchangeTimeoutError(DataraxError, RuntimeError):
    """A process did not reach an exchange between hosts in time.

    Attributes:
        process: the process that did not arrive.
        what: the call that exchanged, e.g. ``"shard()"``.
    """

    def __init__(self, message: str, *, process: int, what: str):
        super().__init__(message)
        self.process, self.what = process, what


# Feeding: pipelines, their stages and workers.


class StageStopIterationError(DataraxError, RuntimeError):
    """A stage or a source raised `StopIteration`, which would end an epoch in silence.

    Attributes:
        stage: where, e.g. ``stages[1]`` or ``the source's __getitem__``.
    """

    def __init__(self, message: str, *, stage: str):
        super().__init__(message)
        self.stage = stage


class SupersededIteratorError(DataraxError, RuntimeError):
    """An iterator over a pipeline was used after a newer ``iter()`` or ``set_state``."""


class PipelineStateError(DataraxError, ValueError):
    """A pipeline state is malformed, or does not fit the pipeline it is given to.

    Attributes:
        key: the entry of the state at fault, when one is.
    """

    def __init__(self, message: str, *, key: str | None = None):
        super().__init__(message)
        self.key = key


class SourceChangedError(DataraxError, ValueError):
    """A pipeline's source has another length than when the pipeline was built.

    Attributes:
        built: its length then.
        now: its length now.
    """

    def __init__(self, message: str, *, built: int, now: int):
        super().__init__(message)
        self.built, self.now = built, now


class SourceFileChangedError(DataraxError, RuntimeError):
    """A file that a pipeline's source maps changed after the pipeline was built.

    Attributes:
        path: the file.
    """

    def __init__(self, message: str, *, path: str):
        super().__init__(message)
        self.path = path


class NotPicklableError(DataraxError, TypeError):
    """The source or a stage cannot reach worker processes (``workers=N``).

    Attributes:
        part: which one, ``"source"`` or ``"stages[2]"``.
    """

    def __init__(self, message: str, *, part: str):
        super().__init__(message)
        self.part = part


class WorkerError(DataraxError, RuntimeError):
    """A pipeline's worker process died, or refused to run.

    Attributes:
        exit_codes: the workers' exit codes, where known.
    """

    def __init__(self, message: str, *, exit_codes: Sequence[int | None] = ()):
        super().__init__(message)
        self.exit_codes = list(exit_codes)


class NoMainGuardError(WorkerError):
    """Worker processes ended as they started: the script that iterates a pipeline with
    workers has no ``if __name__ == "__main__":``."""


class WorkerDeviceError(DataraxError, RuntimeError):
    """A host stage in a worker process started JAX on an accelerator.

    Attributes:
        stage: where, e.g. ``stages[0]``.
        platform: the platform JAX started on.
    """

    def __init__(self, message: str, *, stage: str, platform: str):
        super().__init__(message)
        self.stage, self.platform = stage, platform


class WorkerArrayError(DataraxError, TypeError):
    """A host stage in a worker process returned jax.Arrays instead of host data.

    Attributes:
        stage: where, e.g. ``stages[0]``.
    """

    def __init__(self, message: str, *, stage: str):
        super().__init__(message)
        self.stage = stage


class OutputArrayError(DataraxError, TypeError):
    """`output_array` was asked for an array that shared memory cannot carry (an object
    dtype, whose elements are references into one process's memory).

    Attributes:
        stage: where it was asked for, e.g. ``stages[0]`` (empty outside a pipeline).
        dtype: the dtype asked for.
    """

    def __init__(self, message: str, *, dtype: str, stage: str = ""):
        super().__init__(message)
        self.dtype, self.stage = dtype, stage


# Saving, and clusters.


class CheckpointSaveError(DataraxError, OSError):
    """A save failed; the steps saved before it are still listed and restorable.

    Attributes:
        step: the step that was being saved.
        folder: its temporary folder, removed again.
    """

    def __init__(self, message: str, step: int, folder: str):
        super().__init__(message)
        self.step, self.folder = step, folder


class ClusterError(DataraxError, RuntimeError):
    """A process of a local cluster failed; `process_index` names the first one.

    Attributes:
        process_index: the process to blame: the first that failed, or after a
            time-out the first whose target had not returned.
        outputs: every process's output, in process order; of a longer output only
            the last 64 KiB, after a line saying how much was left out.
        signal: the name of the signal that ended the process to blame (``"SIGSEGV"``
            when it crashed, ``"SIGKILL"`` when something killed it); None when it
            exited, raised, or was still running when the launcher stopped it.
    """

    def __init__(
        self,
        message: str,
        process_index: int | None,
        outputs: Sequence[str],
        *,
        signal: str | None = None,
    ):
        super().__init__(message)
        self.process_index = process_index
        self.outputs = list(outputs)
        self.signal = signal


class EnvironmentVariableError(DataraxError, ValueError):
    """An environment variable holds a value that cannot be used: one that JAX refuses,
    or one that a local cluster's processes must not get.

    Attributes:
        variable: its name, e.g. ``JAX_PLATFORMS``.
        value: the value refused.
    """

    def __init__(self, message: str, *, variable: str, value: str):
        super().__init__(message)
        self.variable, self.value = variable, value


class CheckpointTemplateError(DataraxError, ValueError):
    """The model given to `Checkpoints.restore` as a template has other leaves, or leaves
    of other shapes, than the model saved at that step. Nothing was restored.

    Attributes:
        step: the step asked for.
        missing: the saved leaves the template lacks, e.g. ``("model['b']",)``.
        unexpected: the template's leaves that were not saved.
        shapes: each leaf whose shape differs, as ``{leaf: (saved shape, template shape)}``.
    """

    def __init__(
        self,
        message: str,
        *,
        step: int,
        missing: Sequence[str] = (),
        unexpected: Sequence[str] = (),
        shapes: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
    ):
        super().__init__(message)
        self.step, self.missing, self.unexpected = step, tuple(missing), tuple(unexpected)
        self.shapes = dict(shapes or {})


class CheckpointDamagedError(DataraxError, ValueError, KeyError):
    """A saved step cannot be read: a folder of it is missing, or a file of it is cut
    short or holds what no save writes. Nothing was restored, and the pipeline given to
    `Checkpoints.restore` keeps its position.

    It is a `ValueError` and a `KeyError`, as Orbax's own errors for a file cut short and
    a missing folder are, so code that catches those keeps working.

    Attributes:
        step: the step asked for.
        path: the folder or file at fault.
    """

    def __init__(self, message: str, *, step: int, path: str):
        super().__init__(message)
        self.step, self.path = step, path

    def __str__(self) -> str:  # KeyError would show the message in quotes
        return str(self.args[0]) if self.args else ""


# Token documents.


class DocumentError(DataraxError, ValueError):
    """A document is not a 1-D array of integers (floats, 2-D, text, null, a record
    without the field holding its tokens), or has another length than its entry in
    ``lengths``.

    Attributes:
        index: the document's index in its `Documents`; None where a whole file or
            column is at fault.
        path: the file it is in; None for documents in memory.
    """

    def __init__(self, message: str, *, index: int | None, path: str | None = None):
        super().__init__(message)
        self.index, self.path = index, path


class DocumentFieldError(DocumentError):
    """The field that holds the tokens is missing, or is not a list of integers.

    Attributes:
        field: the field asked for, e.g. ``"tokens"``.
        columns: the fields there are, e.g. ``("text", "input_ids")``.
        index: the document that lacks it; None where a whole file or column does.
        path: the file; None for documents in memory.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str,
        columns: Sequence[str] = (),
        index: int | None = None,
        path: str | None = None,
    ):
        super().__init__(message, index=index, path=path)
        self.field, self.columns = field, tuple(columns)


class DocumentFileNotFoundError(DataraxError, FileNotFoundError):
    """A path or glob pattern given as documents names no file.

    Attributes:
        pattern: the path or pattern, as given.
    """

    def __init__(self, message: str, *, pattern: str):
        super().__init__(message)
        self.pattern = pattern


class DocumentFormatError(DataraxError, ValueError):
    """A file given as documents is of a format `Documents` does not read (told by its
    extension), or is not what its format says (an index of Megatron's format of another
    magic, version or dtype code, a ``.bin`` shorter than its index, a damaged manifest).

    Attributes:
        path: the file.
    """

    def __init__(self, message: str, *, path: str):
        super().__init__(message)
        self.path = path


class RemoteReadError(DataraxError, OSError):
    """A file of a URL could not be read: a fetch failed on every try (a timeout, a
    dropped connection, a server error), or the server ignores byte ranges.

    Attributes:
        url: the file.
        attempts: how many times it was tried.
    """

    def __init__(self, message: str, *, url: str, attempts: int):
        super().__init__(message)
        self.url, self.attempts = url, attempts


class StoreWriteError(DataraxError, RuntimeError):
    """`write_documents` failed on another process of the cluster; the process where it
    failed raises its own error, and every process leaves the store unwritten.

    Attributes:
        process: the process where it failed.
    """

    def __init__(self, message: str, *, process: int):
        super().__init__(message)
        self.process = process
