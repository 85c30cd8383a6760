"""The checks of leaves, and their error text, in one place.

Leaves (names, kinds, dtypes, row counts) are checked here, so that one rule has one
wording wherever it applies; each raises a typed error of `datarax.errors` naming the
leaf. Shardings, alone and against each leaf's shape, are checked by
`datarax.sharding._sharding_checks`; plain arguments (ints, strings, shapes) by
`datarax._validate`, which needs no JAX.
"""

from __future__ import annotations

import collections
import collections.abc
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from datarax._caches import cached
from datarax.errors import LeafTypeError, LeafValueError, RowCountError

_SCALAR_TYPES = (bool, int, float, complex, np.generic)


def leaf_name(path: Sequence[Any], root: str = "batch") -> str:
    """The user-facing name of a leaf, e.g. ``batch['label']`` or ``batch[0]``."""
    return root + jax.tree_util.keystr(tuple(path))


def _unsortable(node: Any) -> bool:
    """Whether `node` is a dict that JAX sorts by key and whose keys cannot be sorted."""
    if type(node) not in (dict, collections.defaultdict):
        return False
    try:
        sorted(node)
    except TypeError:
        return True
    return False


def check_keys_sortable(tree: Any, root: str = "batch") -> None:
    """Raises TypeError naming the first dict in `tree` whose keys JAX cannot sort.

    JAX flattens a dict in key order, so ``{"a": x, 1: y}`` has no order and no pytree
    function accepts it; this says which dict it is and what to do.

    Example:
        >>> check_keys_sortable({"image": {"a": 1, 2: 3}})
        Traceback (most recent call last):
        datarax.errors.LeafTypeError: batch['image'] is a dict with keys of different types...
    """
    found = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_unsortable)[0]
    for path, node in found:
        if _unsortable(node):
            kinds = sorted({type(key).__name__ for key in node})
            what = f"with keys of different types ({', '.join(kinds)})"
            if len(kinds) == 1:
                what = f"whose {kinds[0]} keys cannot be compared with each other"
            raise LeafTypeError(
                f"{leaf_name(path, root)} is a dict {what}: {list(node)!r:.100}. "
                "JAX orders dict entries by key, so use keys of one type that compare, e.g. "
                "all strings.",
                leaf=leaf_name(path, root),
            )


def flatten_with_path(tree: Any, root: str = "batch") -> tuple[list[tuple[Any, Any]], Any]:
    """``jax.tree_util.tree_flatten_with_path(tree)``, with a clear error for dict keys
    that cannot be sorted (see `check_keys_sortable`)."""
    try:
        return jax.tree_util.tree_flatten_with_path(tree)
    except (TypeError, ValueError):
        check_keys_sortable(tree, root)
        raise
    except (RecursionError, SystemError) as error:  # JAX wraps its RecursionError
        if not isinstance(error, RecursionError) and not isinstance(
            error.__cause__, RecursionError
        ):
            raise
        raise ValueError(
            f"{root} contains itself (a list or dict inside itself) or is nested deeper "
            "than JAX can flatten; pass a tree of dicts, lists and arrays that ends."
        ) from None


def flatten_with_names(tree: Any, root: str = "batch") -> tuple[list[tuple[str, Any]], Any]:
    """``([(leaf name, leaf), ...], treedef)``, with a clear error for unsortable dict keys.

    Example:
        >>> flatten_with_names({"b": 1, "a": [2]})[0]
        [("batch['a'][0]", 2), ("batch['b']", 1)]
    """
    path_leaves, treedef = flatten_with_path(tree, root)
    return [(leaf_name(path, root), leaf) for path, leaf in path_leaves], treedef


@cached("dtypes JAX takes", 256)
def _jax_accepts(dtype: np.dtype) -> bool:
    """Whether JAX takes arrays of `dtype` (decided by JAX itself, without a device)."""
    try:
        jax.eval_shape(lambda x: x, np.zeros((0,), dtype))
    except TypeError:
        return False
    return True


@cached("dtypes each device takes", 1024)
def _device_accepts(dtype: np.dtype, device: Any) -> bool:
    """Whether ``jax.device_put`` takes arrays of `dtype` onto `device` (an empty one is
    tried once): a backend may lack a dtype JAX knows, as CPU lacked float6 before jax 0.12."""
    try:
        jax.device_put(np.zeros((0,), dtype), device)
    except (TypeError, ValueError, jax.errors.JaxRuntimeError):
        return False
    return True


def check_not_deleted(name: str, leaf: Any) -> None:
    """Raises TypeError when `leaf` is a jax.Array that was deleted or donated."""
    if isinstance(leaf, jax.Array) and leaf.is_deleted():
        raise LeafTypeError(
            f"{name} is a jax.Array that has been deleted or donated (shape {leaf.shape}), "
            "so it holds no data any more. Pass the array a jitted step returned instead "
            "of one it consumed with donate_argnums, or keep a copy.",
            leaf=name,
        )


def _check_python_int(name: str, leaf: int) -> None:
    dtype = jax.dtypes.canonicalize_dtype(np.int64)
    info = np.iinfo(dtype)
    if not info.min <= leaf <= info.max:
        raise LeafValueError(
            f"{name} is the python int {leaf}, which does not fit JAX's default integer "
            f"type {dtype} ([{info.min}, {info.max}]). Pass it as a float, or as a numpy "
            "int64 array with jax_enable_x64 on, or split it into smaller numbers.",
            leaf=name,
        )


def check_known_container(name: str, leaf: Any) -> None:
    """Raises TypeError for a mapping or set that ``jax.tree_util`` takes as one leaf,
    and for a masked array, whose mask every array of JAX (and ``np.asarray``) drops.

    Containers are what ``jax.tree_util`` says they are: a dict, an OrderedDict, a
    list or a registered pytree is one, a ``types.MappingProxyType`` or a home-made
    ``collections.abc.Mapping`` is not, and would be split (or placed) as one leaf.

    Example:
        >>> import types
        >>> check_known_container("data", types.MappingProxyType({"x": 1}))
        Traceback (most recent call last):
        ...
        datarax.errors.LeafTypeError: data is a mappingproxy, a container jax.tree_util...
    """
    if isinstance(leaf, (collections.abc.Mapping, collections.abc.Set)):
        raise LeafTypeError(
            f"{name} is a {type(leaf).__name__}, a container jax.tree_util does not know, "
            "so JAX would take it whole as one leaf. Pass a dict (e.g. dict(...)) or a "
            "list, or register the type with jax.tree_util.register_pytree_node.",
            leaf=name,
        )
    if isinstance(leaf, np.ma.MaskedArray):
        raise LeafTypeError(
            f"{name} is a numpy masked array (shape {leaf.shape}); its mask would be lost, "
            "as no jax.Array has one. Pass the values and the mask as two leaves, e.g. "
            f"{{'x': a.filled(0), 'x_mask': ~np.ma.getmaskarray(a)}}.",
            leaf=name,
        )


def check_leaf_kind(name: str, leaf: Any, device: Any = None) -> None:
    """Raises TypeError (ValueError for a python int out of range) for a leaf that cannot
    become a jax.Array, on `device` when given.

    Every dtype JAX accepts passes, bfloat16, int4 and float8 included; strings,
    objects, datetimes, long doubles, byte-swapped dtypes, dtypes the device's backend
    lacks and deleted arrays do not.
    """
    if isinstance(leaf, (str, bytes)):
        raise LeafTypeError(
            f"{name} is a {type(leaf).__name__} ({leaf!r:.40}); only numeric arrays and "
            "scalars can be placed on devices. Encode text as integer ids on the host, "
            "or remove the leaf from the batch before sharding.",
            leaf=name,
        )
    check_not_deleted(name, leaf)
    check_known_container(name, leaf)
    if isinstance(leaf, (np.ndarray, np.generic, jax.Array)):
        dtype = np.dtype(leaf.dtype)
        where = "JAX does not accept on devices"
        accepted = _jax_accepts(dtype)
        if accepted and device is not None and not isinstance(leaf, jax.Array):
            accepted = _device_accepts(dtype, device)
            where = f"JAX's {device.platform.upper()} devices do not accept"
        if not accepted:
            fix = "Convert it to a numeric dtype JAX supports (e.g. x.astype(np.float32))"
            if dtype.kind in "Mm":
                fix = "Convert it to numbers first (e.g. x.astype('int64') for epoch units)"
            elif not dtype.isnative:
                fix = "Convert it to native byte order first (x.astype(x.dtype.newbyteorder('='))"
            elif dtype == np.longdouble:
                fix = "Convert it to float64 or float32 first"
            raise LeafTypeError(
                f"{name} has dtype {dtype} (shape {np.shape(leaf)}), which {where}. "
                f"{fix}, or remove it from the batch.",
                leaf=name,
            )
        return
    if isinstance(leaf, int) and not isinstance(leaf, bool):
        _check_python_int(name, leaf)
    if not isinstance(leaf, _SCALAR_TYPES):
        raise LeafTypeError(
            f"{name} is a {type(leaf).__name__}, which is neither an array nor a "
            "number. A batch is a pytree (dicts, lists, tuples) whose leaves are numpy "
            "arrays, jax arrays or python numbers.",
            leaf=name,
        )


def check_rows_agree(rows: Sequence[tuple[str, int]]) -> None:
    """Raises ValueError when the named leaves differ in their number of rows."""
    if len({count for _, count in rows}) > 1:
        listed = ", ".join(f"{name} has {count} rows" for name, count in rows)
        raise RowCountError(
            f"The leaves differ in their number of rows: {listed}. Every leaf needs one "
            "row per example; slice or pad them to the same number of rows.",
            rows=dict(rows),
        )
