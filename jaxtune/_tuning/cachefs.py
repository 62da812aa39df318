"""Safe access to files in a cache directory that jaxtune does not trust.

Never through a symlink, never a FIFO or device, and every OSError turned into advice.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pathlib
import stat
import time

from .._codec import UnsafeFileError
from .._errors import CacheError

__all__ = ["Version", "file_version", "fix_for", "open_lock", "wait_for_lock"]

#: What identifies a file's content as far as its directory entry tells.
Version = tuple[int, int, int]


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


def wait_for_lock(fd: int, lock: pathlib.Path, timeout_s: float) -> None:
    """Takes the exclusive lock on ``fd`` within ``timeout_s`` seconds and writes this
    process's pid into the lock file, so that whoever waits can say who holds it.

    Raises:
        CacheError: another process held the lock all that time (named by its pid).
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise CacheError(
                    f"jaxtune gave up waiting for the lock {lock} after {timeout_s:g} s: "
                    f"{_holder(fd)} holds it (JAXTUNE_LOCK_TIMEOUT sets the wait). End that "
                    "process if it is stuck, or delete the lock file if no jaxtune runs."
                ) from None
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.1)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # a lock file that cannot hold the pid still locks


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
