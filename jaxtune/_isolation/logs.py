"""Child logs: the private folder they live in, the crash logs kept, a log's telling tail.

A child's stdout and stderr go to ``child-<parent pid>-*.log`` in :func:`log_dir` (those
of parents that died are deleted the next time a process starts a child); a child that ends
well deletes it, one that crashed or hung leaves its end as ``crash-*.log``, secrets
masked (the newest :data:`KEEP_CRASH_LOGS` are kept).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import re
import shutil
import stat
import tempfile
import threading
import time

from .._core.errors import warn_once
from .._core.masking import mask
from .state import ISOLATION_STATE

__all__ = [
    "CRASH_LOG_BYTES",
    "KEEP_CRASH_LOGS",
    "crashed_thread",
    "keep_crash_log",
    "log_dir",
    "read_tail",
]

#: Crash logs kept (newest first) in :func:`log_dir`; older ones are deleted.
KEEP_CRASH_LOGS = 5
#: Bytes of a crashed child's log that are kept (its end, where the crash is).
CRASH_LOG_BYTES = 1 << 20
_TAIL_LINES = 15
_TAIL_BYTES = 64 << 10

#: Other names tried, in turn, when ``$TMPDIR/jaxtune-<uid>`` is not private: the same
#: ones in every process, so that the rules above (dead parents' logs deleted, the newest
#: crash logs kept) reach the folder from the next run too. Past these, a folder of this
#: process's own, deleted with its logs when the process ends.
SPARE_NAMES = 8

_PUT_BACK = "'log folders' puts it back"
_PRIVATE: list[pathlib.Path] = ISOLATION_STATE.keep(
    "log folder chosen",
    list,
    "this user's folder for child logs, once chosen (:func:`log_dir`)",
    never_reset=_PUT_BACK,
)
_OWN: list[pathlib.Path] = ISOLATION_STATE.keep(
    "log folders owned",
    list,
    "log folders of this process's own, deleted when it ends",
    never_reset=_PUT_BACK,
)
_LOCK = threading.Lock()


def _unusable(path: pathlib.Path) -> str | None:
    """Why ``path`` must not hold this user's logs; ``None`` when it is a private folder."""
    try:
        info = os.lstat(path)
    except OSError as e:
        return f"cannot be examined ({e.strerror or e})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.getuid():
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"can be written by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _claim(path: pathlib.Path) -> str | None:
    """Makes ``path`` a private folder unless something is there; why it is unusable."""
    with contextlib.suppress(OSError):
        path.mkdir(mode=0o700)
    return _unusable(path)


def log_dir() -> pathlib.Path:
    """This user's folder for child logs (``$TMPDIR/jaxtune-<uid>``), private to the user.

    Where that name is taken by something that is not private (a symlink, a folder others
    can write, another user's folder, a file), it is never used: the logs go to the first
    private ``$TMPDIR/jaxtune-<uid>.<n>`` (``n`` from 1 to :data:`SPARE_NAMES`), which
    later runs reuse and clean as they would the first, and, were all those taken too, to a
    folder of this process's own that is deleted when it ends. One ``JaxtuneWarning`` says
    which folder was refused, why, and where the logs go.
    """
    with _LOCK:
        if _PRIVATE and _unusable(_PRIVATE[0]) is None:
            return _PRIVATE[0]
        usual = pathlib.Path(tempfile.gettempdir()) / f"jaxtune-{os.getuid()}"
        path = usual
        why = _claim(usual)
        if why is not None:
            path = _spare(usual)
            _say_once(usual, why, path)
        _PRIVATE[:] = [path]
        _forget_dead(path)
        return path


def _spare(usual: pathlib.Path) -> pathlib.Path:
    """The first private spare name of ``usual``, else a new folder of this process's own."""
    for n in range(1, SPARE_NAMES + 1):
        spare = usual.with_name(f"{usual.name}.{n}")
        if _claim(spare) is None:
            return spare
    own = pathlib.Path(tempfile.mkdtemp(prefix=f"{usual.name}-"))
    _OWN.append(own)
    return own


def _say_once(usual: pathlib.Path, why: str, path: pathlib.Path) -> None:
    if path in _OWN:
        where = f"{path}, a private folder of this process's own, deleted when it ends"
    else:
        where = f"the private folder {path}, which later runs use too"
    warn_once(
        ("private log folder", usual),
        f"jaxtune: {usual} {why}, so child processes' logs are not written there; they go "
        f"to {where}. Remove {usual} if nothing uses it, and jaxtune makes its own there.",
        stacklevel=3,
    )


@atexit.register  # registered before the child pool's own exit handler, so it runs after it
def _remove_own() -> None:
    """Deletes this process's own log folders (see :func:`log_dir`) with what is in them."""
    for folder in _OWN:
        shutil.rmtree(folder, ignore_errors=True)


@ISOLATION_STATE.resets(
    "log folders", "forgets the folder chosen for child logs; deletes this process's own ones"
)
def _forget_folders() -> None:
    with _LOCK:
        _remove_own()
        _OWN.clear()
        _PRIVATE.clear()


def _forget_dead(folder: pathlib.Path) -> None:
    """Deletes the child logs of parents that are gone (killed before they could)."""
    for log in folder.glob("child-*-*.log"):
        pid = log.name.split("-")[1]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                log.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def keep_crash_log(log_path: str, pid: int) -> tuple[str, int]:
    """Keeps the end of ``log_path`` as ``crash-<time>-<pid>.log`` beside it, secrets
    masked (:func:`~jaxtune._core.masking.mask`), deletes the log and the oldest crash
    logs; returns the crash log's path and the bytes by which it is shorter than the log
    (so that an offset into the log, less those, is the same distance from the end)."""
    folder = pathlib.Path(log_path).parent
    kept = folder / f"crash-{time.strftime('%Y%m%dT%H%M%S')}-{pid}.log"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    with open(log_path, "rb") as src, os.fdopen(os.open(kept, flags, 0o600), "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        src.seek(max(0, size - CRASH_LOG_BYTES))
        end = src.read(CRASH_LOG_BYTES)
        if size > CRASH_LOG_BYTES:  # from a whole line, so no secret is kept half-masked
            end = end[end.find(b"\n") + 1 :]
        text = mask(end.decode(errors="surrogateescape")).encode(errors="surrogateescape")
        dst.write(text)
    os.unlink(log_path)
    logs = sorted(folder.glob("crash-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in logs[KEEP_CRASH_LOGS:]:
        with contextlib.suppress(OSError):
            old.unlink()
    return str(kept), size - len(text)


def read_tail(log_path: str, since: int, trimmed: int) -> str:
    """The last lines written to ``log_path`` since byte offset ``since`` (``trimmed``:
    bytes by which a crash log is shorter than the log, :func:`keep_crash_log`), at most
    its last 64 KiB read, however large the log, secrets masked
    (:func:`~jaxtune._core.masking.mask`): a failure reason quotes it."""
    try:
        with open(log_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = max(since - trimmed, size - _TAIL_BYTES, 0)
            f.seek(max(start - 1, 0))
            data = f.read(_TAIL_BYTES + (start > 0))
    except OSError:
        return ""
    if start > 0:
        before, data = data[:1], data[1:]
        if trimmed and before != b"\n":
            # Masking moved the crash log's lines (a secret is longer than its mask), so
            # the offset may fall inside the line before: the tail begins at a whole line.
            data = data[data.find(b"\n") + 1 :]
    return mask(_tail_lines(data.decode(errors="replace")))


def _tail_lines(text: str) -> str:
    fatal = text.rfind("Fatal Python error")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if fatal >= 0:
        # faulthandler lists the innermost frame first: keep the head of its report.
        report = text[fatal:]
        current = report.find("Current thread")
        head = report.splitlines()[0]
        body = report[current:] if current >= 0 else report
        lines = [head] + [line.strip() for line in body.splitlines() if line.strip()]
        lines = lines[:_TAIL_LINES]
    else:
        lines = lines[-_TAIL_LINES:]
    return " | ".join(lines) or "(nothing on stderr)"


_CURRENT_THREAD = re.compile(r"Current thread (0x[0-9a-fA-F]+)")


def crashed_thread(tail: str) -> int | None:
    """The thread that crashed the child, as :func:`threading.get_ident` named it there:
    the ``Current thread 0x...`` of the last fatal-error report faulthandler wrote in
    ``tail`` (what :func:`read_tail` returned); ``None`` without one (a crash outside any
    Python thread, or no report)."""
    fatal = tail.rfind("Fatal Python error")
    found = _CURRENT_THREAD.search(tail, fatal) if fatal >= 0 else None
    return int(found.group(1), 16) if found else None
