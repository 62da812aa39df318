"""Every process of a ``jax.distributed`` job uses the leader's config.

Process 0 (the leader) decides as a single process would (its cache, a sweep, nearest,
default) and publishes the decision under a key derived from the kernel, its version, the
call's key, the device kind and the toolchain; the others wait for it (at most
``JAXTUNE_AGREE_TIMEOUT``) and adopt it, even over their own cache. When the leader sweeps,
it first publishes the list of configs; each process measures every n-th one, publishes
its results, and the leader merges them, writes the cache and publishes the winner.

Everything here is a key-value RPC, so it runs at trace time inside ``jax.jit``. A process
decides each key once per round; :func:`new_round` (explicit tuning) starts the next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from .._core import settings as _settings
from .._core import typed
from .._core import versions as _versions
from .._core.codec import DecodeError, packb, unpackb
from .._core.errors import AgreementError, describe
from .._core.vocabulary import Choice, Entry, Source
from .coordination import KeyValue, KeyValueLostError, KeyValueTimeoutError, agreement_key, current
from .state import DISTRIBUTED_STATE

__all__ = ["Question", "agree", "decided", "key_value", "may_write_cache", "new_round"]

#: Runs a sweep of a task, returns its outcome (both the tuning flow's: opaque here).
RunSweep = Callable[[Any], Any]


class Sharing(Protocol):
    """How the tuning flow shares one sweep over the job's processes: agreement moves the
    sweep's space (its configs and default) and the shares (plain data) between them, the
    flow knows what they are."""

    def alone(self, task: Any) -> Any:
        """The whole sweep of ``task``, measured by this process (a single-process job)."""
        ...

    def space(self, task: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The configs ``task`` measures and its default."""
        ...

    def with_space(
        self, task: Any, configs: Sequence[Mapping[str, Any]], default: Mapping[str, Any]
    ) -> Any:
        """``task`` measuring the leader's configs against the leader's default."""
        ...

    def sweep_share(self, task: Any, index: int, count: int) -> dict[str, Any]:
        """Process ``index`` of ``count``: its share of ``task``, measured, as plain data."""
        ...

    def merge(self, task: Any, parts: Sequence[Mapping[str, Any]]) -> Any:
        """The outcome of the whole sweep from every process's share, in process order."""
        ...


_LOCK = threading.Lock()
_MEMOS: dict[tuple[Any, int], tuple[threading.RLock, dict[str, Choice]]] = DISTRIBUTED_STATE.keep(
    "decisions",
    dict,
    "per job and process: a lock that serialises decisions, and the decisions of this round",
    lock=_LOCK,
)
_ROUND: list[int] = DISTRIBUTED_STATE.keep(
    "round",
    lambda: [0],
    "the round of agreement (a new one each time jitted code re-traces)",
    lock=_LOCK,
)

_ADVICE = (
    "Every process must trace the same autotuned kernels with the same shapes and "
    "settings: one that skips a kernel or takes another branch leaves the others waiting. "
    "If the leader is still tuning, raise JAXTUNE_AGREE_TIMEOUT (now {timeout:g} s), or tune "
    "ahead of time (`jaxtune tune -- python train.py`) and ship the cache to every host."
)

#: A wait longer than this is announced on stderr. When process 0 dies, JAX's runtime ends
#: every other process at once (the coordination service lived in process 0), often before
#: jaxtune can raise; the announcement is then what tells the log which decision was pending.
NOTICE_AFTER_S = 1.0

_WAITING = (
    "process {me} is waiting for {subject} (at most {timeout:g} s, JAXTUNE_AGREE_TIMEOUT). "
    "If process {other} dies meanwhile, JAX's distributed runtime ends this process too "
    '("Terminating process because the JAX distributed service detected fatal errors"); '
    "process {other}'s log says why."
)

_LOST = (
    "process {me} lost the coordination service while {doing} ({reason}). The service runs "
    "in process 0, the leader: it has most likely died, and JAX's distributed runtime ends "
    "the other processes with it; process 0's log says why."
)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    """One decision to agree on, and how this process would decide it alone.

    ``decide(run_sweep)`` runs the single-process lookup after the scopes, sweeping through
    ``run_sweep`` on a miss in tune mode; ``task()`` builds the kernel's sweep (a follower
    replaces its configs with the leader's); ``sharing`` splits a sweep's task over the
    processes and merges their shares.
    """

    kernel: str
    key: str
    version: str
    device_kind: str
    decide: Callable[[RunSweep], Choice]
    task: Callable[[], Any]
    sharing: Sharing | None


def key_value() -> KeyValue | None:
    """The key-value store agreement runs on, or ``None`` in a single-process job."""
    return current()


def may_write_cache() -> bool:
    """Whether this process writes the cache file: only process 0 of a distributed job."""
    s = key_value()
    return s is None or s.process_id == 0


def new_round() -> None:
    """Starts a new round of decisions (after explicit tuning every key is decided again;
    every process must start it at the same point of the program, as SPMD programs do)."""
    with _LOCK:
        _ROUND[0] += 1
        _MEMOS.clear()


def _memo(s: KeyValue) -> tuple[threading.RLock, dict[str, Choice]]:
    with _LOCK:
        return _MEMOS.setdefault((s.job, s.process_id), (threading.RLock(), {}))


def _base(kernel: str, version: str, key: str, device_kind: str) -> str:
    return agreement_key(kernel, version, key, device_kind, _versions.toolchain(), _ROUND[0])


def decided(kernel: str, version: str, key: str, device_kind: str) -> Choice | None:
    """The agreed config of this key in the current round, if this process has one."""
    s = key_value()
    if s is None:
        return None
    lock, memo = _memo(s)
    with lock:
        return memo.get(_base(kernel, version, key, device_kind))


def agree(question: Question) -> Choice:
    """The config every process uses for ``question``: the leader's decision.

    Raises:
        AgreementError: the leader (or, in a shared sweep, another process) did not publish
            in time, the key-value store was lost, or the leader failed while deciding.
    """
    s = key_value()
    if s is None:
        return question.decide(lambda task: _sharing(question).alone(task))
    lock, memo = _memo(s)
    with lock:
        base = _base(question.kernel, question.version, question.key, question.device_kind)
        hit = memo.get(base)
        if hit is None:
            hit = (_lead if s.process_id == 0 else _follow)(s, base, question)
            memo[base] = hit
        return hit


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Decided:
    """What the leader published: the config every process uses, with where it came from
    and the entry behind it."""

    WIRE_TAG: ClassVar = ("kind", "config")
    config: Mapping[str, Any]
    source: Source
    entry: Entry | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Failed:
    """The leader failed while deciding, and why."""

    WIRE_TAG: ClassVar = ("kind", "error")
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Shared:
    """The leader shares its sweep: the configs each process takes its share of, and the
    default every share is checked against."""

    WIRE_TAG: ClassVar = ("kind", "sweep")
    configs: tuple[Mapping[str, Any], ...]
    default: Mapping[str, Any]


_Published = _Decided | _Failed | _Shared


def _published(data: bytes, key: str) -> _Published:
    """What the leader published under ``key``.

    Raises:
        AgreementError: it is no record of agreement (another jaxtune's, or damaged).
    """
    try:
        found: _Published = typed.decode(_Published, unpackb(data), "", within=key)
    except (DecodeError, typed.MismatchError) as e:
        raise AgreementError(f"process 0 (the leader) published no decision: {e}") from None
    return found


def _record(choice: Choice) -> bytes:
    decided = _Decided(config=dict(choice.config), source=choice.source, entry=choice.entry)
    return packb(typed.encode(decided))


def _error_record(e: BaseException) -> bytes:
    return packb(typed.encode(_Failed(message=f"{describe(e)}")))


def _lead(s: KeyValue, base: str, q: Question) -> Choice:
    swept: list[bool] = []

    def run_sweep(task: Any) -> Any:
        sharing = _sharing(q)
        configs, default = sharing.space(task)
        lead = _Shared(configs=tuple(configs), default=default)
        if not s.publish(f"{base}/lead", packb(typed.encode(lead))):
            raise AgreementError(_already(q, s))
        swept.append(True)
        parts = [sharing.sweep_share(task, 0, s.process_count)]
        for index in range(1, s.process_count):
            data = _wait(s, f"{base}/share/{index}", q, index, "its share of the sweep")
            parts.append(unpackb(data))
        return sharing.merge(task, parts)

    try:
        choice = q.decide(run_sweep)
    except BaseException as e:
        # Followers fail at once with the leader's reason instead of waiting out the timeout.
        with contextlib.suppress(KeyValueLostError):
            s.publish(f"{base}/result" if swept else f"{base}/lead", _error_record(e))
        raise
    final = f"{base}/result" if swept else f"{base}/lead"
    if not _publish(s, final, _record(choice), q):
        # Decided already (another thread of ours).
        return _adopt(_published(s.wait(final, 1.0), final), q, s)
    return choice


def _publish(s: KeyValue, key: str, value: bytes, q: Question) -> bool:
    try:
        return s.publish(key, value)
    except KeyValueLostError as e:
        doing = f"publishing its part of the decision on {q.kernel} for {q.key}"
        raise _lost(s, doing, e) from None


def _follow(s: KeyValue, base: str, q: Question) -> Choice:
    lead = _published(_wait(s, f"{base}/lead", q, 0, "the config"), f"{base}/lead")
    if not isinstance(lead, _Shared):
        return _adopt(lead, q, s)
    sharing = _sharing(q)
    task = sharing.with_space(q.task(), lead.configs, lead.default)
    part = sharing.sweep_share(task, s.process_id, s.process_count)
    _publish(s, f"{base}/share/{s.process_id}", packb(part), q)
    # Twice the timeout: the leader may itself wait the timeout for a missing share, and
    # then publishes why, which is the better message.
    winner = _wait(s, f"{base}/result", q, 0, "the winner of the shared sweep", scale=2)
    return _adopt(_published(winner, f"{base}/result"), q, s)


def _sharing(q: Question) -> Sharing:
    if q.sharing is None:
        raise AgreementError(f"the decision on {q.kernel} for {q.key} cannot share a sweep")
    return q.sharing


def _adopt(record: _Published, q: Question, s: KeyValue) -> Choice:
    if isinstance(record, _Failed):
        raise AgreementError(
            f"process 0 (the leader) failed while deciding the config of {q.kernel} for "
            f"{q.key}, so process {s.process_id} cannot use it: {record.message}"
        )
    if not isinstance(record, _Decided):
        raise AgreementError("process 0 (the leader) published a sweep where a config was due")
    return Choice(config=dict(record.config), source=record.source, key=q.key, entry=record.entry)


def _wait(s: KeyValue, key: str, q: Question, other: int, what: str, *, scale: float = 1) -> bytes:
    timeout = _settings.settings().agree_timeout * scale
    role = "the leader" if other == 0 else "a follower"
    subject = f"process {other} ({role}) to publish {what} of {q.kernel} for {q.key}"
    start = time.monotonic()
    try:
        try:
            return s.wait(key, min(timeout, NOTICE_AFTER_S))
        except KeyValueTimeoutError:
            if timeout <= NOTICE_AFTER_S:
                raise
        _say(_WAITING.format(me=s.process_id, subject=subject, timeout=timeout, other=other))
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            raise KeyValueTimeoutError(key)
        return s.wait(key, left)
    except KeyValueTimeoutError:
        raise AgreementError(
            f"process {s.process_id} waited {timeout:g} s (JAXTUNE_AGREE_TIMEOUT) for "
            f"{subject}, and nothing came. " + _ADVICE.format(timeout=timeout)
        ) from None
    except KeyValueLostError as e:
        raise _lost(s, f"waiting for {subject}", e) from None


def _lost(s: KeyValue, doing: str, e: KeyValueLostError) -> AgreementError:
    """The error of a process that lost the key-value store, also written to stderr at once: JAX's
    runtime usually ends the process within milliseconds, before the error can surface."""
    message = _LOST.format(me=s.process_id, doing=doing, reason=e)
    _say(message)
    return AgreementError(message)


def _say(message: str) -> None:
    print(f"jaxtune: {message}", file=sys.stderr, flush=True)


def _already(q: Question, s: KeyValue) -> str:
    return (
        f"the config of {q.kernel} for {q.key} was already being decided in this round when "
        f"process {s.process_id} started a sweep for it; call jaxtune's tuning functions in "
        "the same order on every process."
    )
