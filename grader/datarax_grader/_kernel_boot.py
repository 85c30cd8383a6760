"""The kernel of a graded notebook: set up, then an ordinary IPython kernel.

``python -I -B _kernel_boot.py LIBRARY PROTECTED -f CONNECTION_FILE`` runs before any
cell of the student's, as the kernel process itself (``-B``: it writes no compiled
file into the Python installation, which the grader may compare between submissions):

- ``sys.path`` starts with `LIBRARY`, the submission's own copy of datarax, the course
  (without the answer keys) and the grader; ``-I`` has left out the environment's
  ``PYTHON*`` variables, the user's site folder and the current folder. Those packages,
  and every module in them, are imported from that copy alone (`CopyOnly`): an editable
  install's finder would otherwise find a module the copy leaves out (the answer keys)
  in the checkout;
- `PROTECTED` (comma-separated pids, or ``-``) are the processes the kernel must not
  signal, where no namespace keeps it from them (`datarax_grader._seccomp`);
- every cell's output to ``stdout`` and to ``stderr`` is capped (`CappedStream`): past
  `CELL_OUTPUT_LIMIT` characters a cell's output is dropped, after one line saying so,
  and IPython may not keep a copy of every write in its history (from IPython 9 it
  wraps the stream's ``write`` to do so, without a limit), so a cell that prints
  without end costs neither the kernel nor the grader memory.

It imports only the standard library and ipykernel before the kernel starts, so it
runs by path.
"""

from __future__ import annotations

import importlib.machinery
import resource
import sys
from typing import Any

from ipykernel.iostream import OutStream

CELL_OUTPUT_LIMIT = 1 << 20  # characters of one cell's stdout, and of its stderr
CUT = "\n[grading: this cell's output was cut here, at {limit:,} characters]\n"


class CappedStream(OutStream):
    """ipykernel's output stream, which drops a cell's output past `CELL_OUTPUT_LIMIT`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cell: Any = None
        self._written = 0

    def __setattr__(self, name: str, value: Any) -> None:
        """Keeps `write` this class's own: IPython's wrapper would keep every write."""
        if name != "write":
            super().__setattr__(name, value)

    def write(self, string: str) -> int | None:  # type: ignore[override]
        """Writes `string`, or what of it fits in the cell's allowance."""
        if not isinstance(string, str):
            return super().write(string)
        cell = self.parent_header.get("msg_id")
        if cell != self._cell:
            self._cell, self._written = cell, 0
        room = CELL_OUTPUT_LIMIT - self._written
        if room > 0:
            shown = string if len(string) <= room else string[:room] + CUT.format(limit=room)
            self._written += len(string) if len(string) <= room else room
            super().write(shown)
        return len(string)


class CopyOnly:
    """Imports the library's packages (`PACKAGES`) from the kernel's copy of them alone: a
    module of the course or the grader that the copy lacks is not found, wherever else it
    may be installed. (One of datarax the copy lacks is left to the other finders: the
    library's own finder of its deprecated paths, ``datarax.exercises`` and the like.)"""

    PACKAGES = ("datarax", "datarax_course", "datarax_grader")

    def __init__(self, library: str) -> None:
        self.library = library

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        """The module's spec from the copy; None for modules of other packages."""
        if fullname.partition(".")[0] not in self.PACKAGES:
            return None
        where = [self.library] if "." not in fullname else path
        spec = importlib.machinery.PathFinder.find_spec(fullname, where, target)
        if spec is None and not fullname.startswith("datarax."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return spec


def main(argv: list[str]) -> None:
    """Sets the kernel up as the module's docstring says, then runs it."""
    library, protected, *kernel_argv = argv
    sys.path.insert(0, library)
    sys.meta_path.insert(0, CopyOnly(library))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if protected != "-":
        from datarax_grader._seccomp import protect

        protect([int(pid) for pid in protected.split(",")])
    from ipykernel.kernelapp import IPKernelApp

    stream = f"{__name__}.CappedStream"  # __main__ when run as the kernel's script
    options = [f"--IPKernelApp.outstream_class={stream}", "--IPKernelApp.parent_handle=0"]
    IPKernelApp.launch_instance(argv=[*kernel_argv, *options])  # the grader ends it


if __name__ == "__main__":
    main(sys.argv[1:])
