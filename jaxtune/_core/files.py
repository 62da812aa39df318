"""Safe access to files in a cache directory that jaxtune does not trust.

Never through a symlink, never a FIFO or device, and every OSError turned into advice.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import re
import stat
import time
from collections.abc import Iterator
from types import ModuleType

from .codec import UnsafeFileError
from .errors import CacheError, warn_once

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows and some embedded Pythons: no POSIX file locks
    fcntl = None

__all__ = [
    "NOT_A_DIRECTORY",
    "LockHeldError",
    "Version",
    "file_version",
    "fix_for",
    "forget_stale_temporaries",
    "locked",
    "open_lock",
    "real_folder",
    "wait_for_lock",
]

NOT_A_DIRECTORY = (
    "jaxtune cache directory {root} is a file or lies below one: no tuned config is read "
    "from it (kernels use their defaults) and none can be saved there. Set "
    "JAXTUNE_CACHE_DIR to a directory."
)

#: What identifies a file's content as far as its directory entry tells.
Version = tuple[int, int, int]


class LockHeldError(CacheError):
    """Another process held a cache file's lock for all the time the caller would wait
    (none at all for a read)."""

    def __init__(self, message: str, *, lock: pathlib.Path, holder: str) -> None:
        super().__init__(message)
        #: The lock file.
        self.lock = lock
        #: Who holds it: ``"process 1234"``, or a phrase when no pid was recorded.
        self.holder = holder


def file_version(path: pathlib.Path) -> Version:
    """Identity of a file's content as far as the directory tells (never follows links)."""
    info = os.lstat(path)
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def open_lock(path: pathlib.Path) -> int:
    """A descriptor on the lock file, never through a symlink and never a FIFO or device."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if os.path.islink(path):
            raise UnsafeFileError(f"the lock file {path} is a symlink; remove it") from e
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeFileError(f"the lock file {path} is not a regular file; remove it")
    return fd


@contextlib.contextmanager
def locked(path: pathlib.Path, timeout_s: float) -> Iterator[None]:
    """Holds the lock of cache file ``path`` (its holder's pid written in the lock file),
    in a real folder of the cache, and deletes dead writers' temporaries of ``path``.
    ``timeout_s`` 0: take it only if it is free now.

    Raises:
        LockHeldError: another process held it for ``timeout_s`` seconds.
        OSError: the folder or lock file cannot be made or is unsafe.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    real_folder(path.parent)
    lock = path.with_name(path.name + ".lock")
    fd = open_lock(lock)
    try:
        if wait_for_lock(fd, lock, timeout_s):
            forget_stale_temporaries(path)  # only under the lock: no writer is live
        yield
    finally:
        os.close(fd)  # closing releases the lock


def real_folder(folder: pathlib.Path) -> None:
    """Refuses a device-kind folder that is a symlink (writes would land wherever it
    points, out of the cache directory) or not a directory.

    Raises:
        UnsafeFileError: it is one of those.
    """
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise UnsafeFileError(
            f"{folder} is a symlink or not a directory; jaxtune writes only into folders "
            "it made inside the cache directory"
        )


def forget_stale_temporaries(path: pathlib.Path) -> None:
    """Deletes the temporary files of writers of ``path`` that died before renaming them
    (``.<name>.XXXXXXXX.tmp``); the file's lock is held, so no live writer has one."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    try:
        names = [e.name for e in os.scandir(path.parent) if pattern.fullmatch(e.name)]
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(path.parent / name)


def wait_for_lock(fd: int, lock: pathlib.Path, timeout_s: float) -> bool:
    """Takes the exclusive lock on ``fd`` within ``timeout_s`` seconds and writes this
    process's pid into the lock file, so that whoever waits can say who holds it. Where
    Python has no ``fcntl`` (Windows), writes go unlocked, with one warning: returns
    whether the lock is held.

    Raises:
        LockHeldError: another process held the lock all that time (named by its pid); with
            ``timeout_s`` 0, at the first try.
    """
    if fcntl is None:
        warn_once(
            ("no fcntl",),
            "jaxtune: this Python has no fcntl module, so cache files are written "
            "without a lock: each write is still atomic (a reader sees a whole file), "
            "but two processes tuning into the same JAXTUNE_CACHE_DIR at once may "
            "lose each other's entries. Give each such process its own "
            "JAXTUNE_CACHE_DIR.",
            stacklevel=4,
        )
        return False
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _holder(fd)
                raise LockHeldError(
                    f"jaxtune gave up waiting for the lock {lock} after {timeout_s:g} s: "
                    f"{holder} holds it (JAXTUNE_LOCK_TIMEOUT sets the wait). End that "
                    "process if it is stuck, or delete the lock file if no jaxtune runs.",
                    lock=lock,
                    holder=holder,
                ) from None
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.1)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # a lock file that cannot hold the pid still locks
    return True


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        pid = ""
    return f"process {pid}" if pid.isdigit() else "another process (pid not recorded)"


def fix_for(error: OSError, path: pathlib.Path) -> str:
    """What the user can do about an OSError on a cache path."""
    if isinstance(error, UnsafeFileError):
        return f"Remove {path} (jaxtune only uses regular files it wrote) and run again."
    if error.errno in (errno.EACCES, errno.EPERM):
        return (
            f"Give your user read and write access (chmod u+rwX -R {path.parent}) or set "
            "JAXTUNE_CACHE_DIR to a writable directory."
        )
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"A parent of {path} is a file; set JAXTUNE_CACHE_DIR to a directory."
    if error.errno == errno.EROFS:
        return "The file system is read-only; set JAXTUNE_CACHE_DIR to a writable directory."
    if error.errno == errno.ENOSPC:
        return "The disk is full; free space or set JAXTUNE_CACHE_DIR elsewhere."
    return "Set JAXTUNE_CACHE_DIR to a writable directory."
