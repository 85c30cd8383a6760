"""A Ctrl-C held back until a piece of work that must not stop half-way has finished.

Orbax writes a checkpoint's step from threads of its own. A `KeyboardInterrupt` raised
in the main thread while they write stops the waiting, not the writing: the partial
folder that the save's clean-up removes is made again behind it, and a Ctrl-C that
lands inside Orbax's event loop can even be lost. So while `finish_before_ctrl_c`
runs its block in the main thread, the first Ctrl-C (SIGINT) is only recorded; the
block finishes, and the `KeyboardInterrupt` is raised as the block ends. A second
Ctrl-C raises at once, for a block that takes too long.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def finish_before_ctrl_c(what: str) -> Iterator[None]:
    """Runs the block to its end before a Ctrl-C raises `KeyboardInterrupt`.

    Applies where Ctrl-C raises `KeyboardInterrupt` (Python's own SIGINT handler) and
    in the main thread, the one that gets it; elsewhere the block runs as it is.

    Args:
        what: what the block does, for the line printed on the first Ctrl-C (e.g.
            ``"saving step 3"``).

    Raises:
        KeyboardInterrupt: Ctrl-C was pressed while the block ran; raised once it has
            ended, from the block's own exception, if it raised one.

    Example:
        >>> with finish_before_ctrl_c("adding"):
        ...     total = 1 + 1
        >>> total
        2
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    pressed: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        if pressed:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        pressed.append(signum)
        sys.stderr.write(
            f"Ctrl-C: finishing {what} first, then stopping (Ctrl-C again to stop at once).\n"
        )

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        if pressed:
            raise KeyboardInterrupt from error
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt
