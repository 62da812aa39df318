"""Safe access to files in a cache directory that jaxtune does not trust.

Never through a symlink, never a FIFO or device, and every OSError turned into advice.
"""

from __future__ import annotations

import errno
import os
import pathlib
import stat

from .._codec import UnsafeFileError

__all__ = ["Version", "file_version", "fix_for", "open_lock"]

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
