"""What the commands write: their refusals, stdout, and files replaced whole.

``CommandFailed`` and ``OutputFailed`` are the one-line refusals ``cli.main`` prints
(exit 2 and 1); ``replacing`` writes a file that appears only once complete.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO


class CommandFailed(Exception):
    """A command's input cannot be used (a file it cannot read or write, a journal it
    cannot open): ``main`` prints the message as one line and exits 2."""


class OutputFailed(CommandFailed):
    """Writing the command's output failed part way (a full disk, an I/O error): nothing
    was wrong with the command, so ``main`` exits 1, not 2, with one line."""


# Errors of the machine, not of the command: a full disk or quota, an I/O error.
_MACHINE_FAILED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


class ReaderGone(Exception):
    """stdout's reader stopped reading (``| head``): ``main`` exits quietly with SIGPIPE's code."""


@contextlib.contextmanager
def writing_stdout() -> Iterator[None]:
    """A block that writes to stdout, flushed at its end: a reader that went away ends the
    command quietly (``ReaderGone``), a stdout that cannot take it (a full disk) is one
    line (``CommandFailed``). Either way stdout then points at /dev/null, so the flush at
    exit has nothing left to fail on."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise ReaderGone from None
    except OSError as exc:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise OutputFailed(f"cannot write to stdout: {reason(exc)}") from None


@contextlib.contextmanager
def replacing(path: Path, option: str) -> Iterator[IO[str]]:
    """A text file that becomes ``path`` only once the block ends without an error.

    Until then ``path`` keeps what it had: the text goes to a temporary file beside it,
    synced and renamed over it at the end (a symbolic link is followed: its target is
    replaced). A ``path`` that is not a regular file (``/dev/null``, a FIFO,
    ``/dev/stdout``) is written as it is: there is nothing there to keep. Failures are
    ``CommandFailed`` naming ``option`` and ``path``; the temporary file never stays.
    """
    import stat
    import tempfile

    try:
        mode: int | None = path.stat().st_mode
    except FileNotFoundError:
        mode = None  # a new file (or a dangling link: its target is created)
    except OSError as exc:
        raise CommandFailed(f"{option} {path}: {reason(exc)}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise CommandFailed(f"{option} {path}: is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        try:
            special = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise CommandFailed(f"{option} {path}: {reason(exc)}") from None
        try:
            with special:
                yield special
        except BrokenPipeError:  # --output /dev/stdout (or a FIFO) whose reader went away
            raise ReaderGone from None
        except OSError as exc:
            raise OutputFailed(f"{option} {path}: {reason(exc)}") from None
        return
    target = path.resolve()
    try:
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        failed = OutputFailed if exc.errno in _MACHINE_FAILED else CommandFailed
        raise failed(f"{option} {path}: {reason(exc)}") from None
    renamed = False
    try:
        with open(fd, "w", encoding="utf-8") as out:
            # mkstemp's 0600 made what open() would have given: the old file's mode, or
            # the umask's for a new file.
            os.fchmod(fd, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
        renamed = True
    except OSError as exc:
        raise OutputFailed(f"{option} {path}: {reason(exc)}") from None
    finally:
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
