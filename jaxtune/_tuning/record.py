"""Recording mode (``jaxtune tune -- python train.py``) and the verbose lookup lines.

When ``JAXTUNE_RECORD`` names a file, every autotuned call a program traces is appended to
it as one msgpack frame (:mod:`.recorded`: the bound call's
:meth:`~.bound.BoundCall.recorded_call`: kernel
reference, abstract arguments, key, space, default, where its config came from). With ``JAXTUNE_RECORD_STOP=1`` the program is stopped once it has
settled: after its first recorded call, nothing traced, lowered or compiled for
``JAXTUNE_RECORD_SETTLE`` seconds (3 by default) and nothing being traced or compiled now.
A program's kernels often sit in several jitted functions (a train and an eval step, an
optimizer update, a sampler) that each compile on their first call, so stopping after the
first compilation would miss all but one; a program that has compiled nothing new for a
while is running steps it has already seen. The last frame says when and why it stopped.
At ``JAXTUNE_VERBOSE>=1`` each (kernel, key) prints, once, which config it uses and why.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from .._core import settings as _settings
from .._core import typed
from .._core.vocabulary import Choice
from . import values as _values
from .bound import BoundCall
from .recorded import Frame, Stopped, ValueSet
from .state import TUNING_STATE
from .sweep_rules import pass_now

__all__ = ["finding_kernels", "note", "observing_calls"]

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
#: JAX's phases from a Python function to an executable: each reports its start (a scalar
#: event) and its end (a duration event).
_PHASES = frozenset(
    {
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        _COMPILE_EVENT,
    }
)
#: How often the settle watch looks at the clock.
_WATCH_S = 0.05
_LOCK = threading.Lock()
_SEEN: set[tuple[str, str, str, str]] = TUNING_STATE.keep(
    "verbose lines", set, "the (kernel, key, source, config) lines JAXTUNE_VERBOSE printed"
)
_RECORDER: list[Any] = TUNING_STATE.keep(
    "recorder", list, "the recording of a program run by `jaxtune tune --`, once it began"
)
_OBSERVED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "jaxtune_observed_calls", default=None
)


@contextlib.contextmanager
def observing_calls() -> Iterator[list[str]]:
    """The ids of the autotuned kernels called inside the block, in order (each once)."""
    calls: list[str] = []
    token = _OBSERVED.set(calls)
    try:
        yield calls
    finally:
        _OBSERVED.reset(token)


_UNREPORTED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxtune_unreported", default=False
)


@contextlib.contextmanager
def unreported() -> Iterator[None]:
    """Configs chosen inside are not reported by ``JAXTUNE_VERBOSE``: in a trace only to
    find the kernels (``jaxtune.tune``), whose configs are not the ones the program will
    run, and in a call whose caller reports where its config came from (:func:`report`)."""
    token = _UNREPORTED.set(True)
    try:
        yield
    finally:
        _UNREPORTED.reset(token)


#: A trace only to find the kernels (``jaxtune.tune``).
finding_kernels = unreported


def _write(fd: int, frame: Frame) -> None:
    """Appends a frame (one at a time, whichever thread: calls are written where they are
    traced, value sets from JAX's callback threads, the last frame from the settle watch)."""
    from .._isolation.framing import write_frame

    write_frame(fd, typed.encode(frame))


class _Recorder:
    def __init__(self, path: str, stop: bool, settle_s: float, value_sets: int) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.recorded: set[tuple[str, str, str]] = set()
        if value_sets:  # JAXTUNE_VALUE_SETS=0: no values recorded, no callbacks
            _values.set_file_collector(_values.ValueSets(value_sets, sink=self.write_values))
        if stop:
            _Settle(self.fd, settle_s).start()

    def write_values(self, collected: _values.Collected) -> None:
        """Appends one value set of a call (see :mod:`.values`) as a ``values`` frame."""
        from .._isolation.wire import NotTransportable, encode_value

        try:
            args = encode_value(collected.args, concrete_limit=1 << 62)
            kwargs = encode_value(collected.kwargs, concrete_limit=1 << 62)
        except NotTransportable:  # the call's request cannot travel either: it says why
            return
        frame = ValueSet(
            kernel=collected.kernel,
            key=collected.key,
            args=args,
            kwargs=kwargs,
            summary=collected.summary,
            dropped=tuple(collected.dropped),
        )
        _write(self.fd, frame)

    def record(self, call: BoundCall, choice: Choice) -> None:
        """Appends the call (:meth:`~.bound.BoundCall.recorded_call`) as a ``call`` frame,
        once per kernel, key and pass a sweep would time."""
        # A call seen again differentiated is recorded again: its sweep times the backward
        # too (jax.grad(jax.jit(f)) traces f before it is differentiated).
        if _SETTLE:
            _SETTLE[0].saw_call()
        seen = (call.kernel.kernel_id, call.sig.key, pass_now(call.kernel.timing))
        if seen in self.recorded:
            return
        self.recorded.add(seen)
        _write(self.fd, call.recorded_call(choice))


_SETTLE: list[_Settle] = TUNING_STATE.keep(
    "settle watch", list, "the watch that stops a recorded program once it settled"
)


class _Settle:
    """Stops the recorded program once it has settled (see the module's docstring), with a
    last ``stopped`` frame that says after how long, after how many compilations, and why."""

    def __init__(self, fd: int, settle_s: float) -> None:
        self.fd = fd
        self.settle_s = settle_s
        self.lock = threading.Lock()
        self.begun = time.monotonic()
        self.first_call: float | None = None
        self.last = self.begun
        #: Phases under way (begun, not ended), in any thread.
        self.busy = 0
        #: Programs compiled since the first recorded call.
        self.compiles = 0

    def start(self) -> None:
        import jax

        _SETTLE.append(self)
        jax.monitoring.register_event_duration_secs_listener(self._ended)
        scalars = getattr(jax.monitoring, "register_scalar_listener", None)
        if scalars is not None:  # without it only the phases' ends are seen
            scalars(self._began)
        threading.Thread(target=self._watch, name="jaxtune-record-settle", daemon=True).start()

    def saw_call(self) -> None:
        with self.lock:
            self.last = time.monotonic()
            if self.first_call is None:
                self.first_call = self.last

    def _began(self, event: str, value: float, **_: Any) -> None:
        if event in _PHASES:
            with self.lock:
                self.busy += 1
                self.last = time.monotonic()

    def _ended(self, event: str, duration_secs: float, **_: Any) -> None:
        if event in _PHASES:
            with self.lock:
                self.busy = max(0, self.busy - 1)
                self.last = time.monotonic()
                if event == _COMPILE_EVENT and self.first_call is not None:
                    self.compiles += 1

    def _watch(self) -> None:
        while True:
            time.sleep(_WATCH_S)
            with self.lock:
                settled = (
                    self.first_call is not None
                    and self.busy == 0
                    and time.monotonic() - self.last >= self.settle_s
                )
                if settled:
                    self._stop()

    def _stop(self) -> None:
        _await_callbacks()
        now = time.monotonic()
        _write(
            self.fd,
            Stopped(
                after_s=round(now - self.begun, 3),
                settle_s=self.settle_s,
                compiles=self.compiles,
            ),
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


#: Seconds the stop waits for the host callbacks of programs under way (value sets).
_CALLBACKS_S = 10.0


def _await_callbacks() -> None:
    """Waits (a while at most) for the host callbacks of the programs under way, so that
    the value sets of the steps already run reach the recording before the stop."""
    import jax

    waiter = threading.Thread(target=jax.effects_barrier, name="jaxtune-record-barrier")
    waiter.daemon = True
    waiter.start()
    waiter.join(_CALLBACKS_S)


def _recorder(settings: _settings.Settings) -> _Recorder | None:
    if not settings.record:
        return None
    with _LOCK:
        if not _RECORDER:
            _RECORDER.append(
                _Recorder(
                    settings.record,
                    settings.record_stop,
                    settings.record_settle,
                    settings.value_sets,
                )
            )
        recorder: _Recorder = _RECORDER[0]
        return recorder


def note(call: BoundCall, choice: Choice) -> None:
    """Called for every config chosen for a call: records it, and reports it once."""
    kernel = call.kernel
    observed = _OBSERVED.get()
    if observed is not None and kernel.kernel_id not in observed:
        observed.append(kernel.kernel_id)
    settings = _settings.settings()
    recorder = _recorder(settings)
    if recorder is not None:
        recorder.record(call, choice)
    report(kernel.kernel_id, call.sig.key, choice, settings)


def report(
    kernel_id: str,
    key: str,
    choice: Choice,
    settings: _settings.Settings | None = None,
    *,
    via: str = "",
) -> None:
    """Under ``JAXTUNE_VERBOSE`` >= 1, one line on stderr for each kernel, key, source and
    config: what ran and where it came from (``explicit``: config keywords the caller gave,
    which are never recorded for a sweep; ``via`` adds to the source)."""
    settings = settings or _settings.settings()
    if settings.verbose >= 1 and not _UNREPORTED.get():
        from .._render.configs import text as config_text

        told = config_text(choice.config)
        seen = (kernel_id, key, choice.source, told)
        with _LOCK:
            if seen in _SEEN:
                return
            _SEEN.add(seen)
        stale = "" if choice.stale is None else f", stale: {choice.stale.text}"
        print(
            f"jaxtune: {kernel_id} {key}: {told} (from {choice.source}{stale}{via})",
            file=sys.stderr,
            flush=True,
        )
