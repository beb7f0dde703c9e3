"""One process per data directory: an OS file lock, taken before anything touches it.

Two sidecars on one journal interleave their sequence numbers, and the order guarantee is
gone without a word. So ``run`` and ``demo`` take an exclusive ``flock`` on
``<data_dir>/sidecar.lock`` first, and a second process refuses to start (exit 2) naming
the directory and the pid written in the lock file by the holder.

``flock`` locks the file (its inode), not the path: the same directory reached by another
path (a symbolic link, a bind mount, a volume mounted twice in a pod) is the same lock.
The kernel releases it when the holder's last descriptor closes, also on ``kill -9``, so
a lock is never stale; the pid left in the file by a dead holder is only text.

NFS: ``flock`` is emulated with POSIX locks by Linux's NFS client (since 2.6.12), so it
holds across machines too; a file system without locks refuses it and the sidecar says so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE = "sidecar.lock"


class DataDirInUse(Exception):
    """The directory is held by another process, or cannot be locked: one line, exit 2."""


class DataDirLock:
    """The held lock: keep it (the descriptor) for as long as the process uses the directory."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_data_dir(directory: Path) -> DataDirLock:
    """Create ``directory`` if needed and lock it for this process.

    ``DataDirInUse`` when another process holds it (the message names the directory and
    the holder's pid) or when it cannot be created or locked.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise DataDirInUse(
            f"data directory {directory}: cannot use it: {exc.strerror or exc}"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise DataDirInUse(
                f"data directory {directory} is in use by another sidecar (pid {holder}); "
                "each sidecar needs its own (SIDECAR_DATA_DIR, demo --data-dir)"
            ) from None
        raise DataDirInUse(
            f"data directory {directory}: cannot lock it: {exc.strerror or exc}"
        ) from None
    # Ours: the pid for the next one to name.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return DataDirLock(directory, fd)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"
