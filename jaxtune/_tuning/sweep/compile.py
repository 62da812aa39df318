"""Compiling a sweep's configs, and the compiled runs kept for the checks and the timing.

This thread traces and lowers each config in turn (Python work that holds the GIL) while a
pool of threads has XLA compile the lowered modules (work that lets go of it); each
outcome is queued as it becomes known, so the configs compiled first run their check while
the others still compile (:mod:`.first_run`). This thread runs at most
:data:`LOWERED_AHEAD` lowered configs per compiling thread ahead of them. Each step is
reported as an event of :mod:`jaxtune._isolation.frames` (``CompileStarted``,
``CompileFinished``), with the thread that works on it, so a crash report pins the config.

A config fails only by what its kernel, JAX's lowering and compiling of it or its run
raise; a fault of jaxtune's own code on the way is raised, noted as such
(:data:`ENGINE_FAULT`), never recorded as the config's failure.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax

from ..._core.vocabulary import Config, Failure, config_id
from ..._isolation import context as _context
from ..._isolation.devices import usable_cores
from ..._isolation.frames import CompileFinished, CompileStarted, Event
from ..digest import KernelCode
from .backward import with_backward
from .breakdown import Breakdown
from .check import prepare, reason
from .inputs import make_inputs
from .lowering_pool import LoweringPool, say_none_without_serialising
from .program_store import ProgramStore, task_key
from .refusals import checker
from .same_program import Programs, program_digest
from .samples import block
from .work import SweepTask

__all__ = [
    "ENGINE_FAULT",
    "LOWERED_AHEAD",
    "MAX_COMPILE_THREADS",
    "Compiled",
    "Compiler",
    "EventSink",
    "Lowering",
    "Refuse",
    "RefusedError",
    "Relay",
    "UnexportedError",
    "blame_jaxtune",
    "compile_threads",
    "config_call",
    "export_program",
    "lower_checked",
    "too_slow",
]

#: ``on_event(event)``: each step, as one of :data:`~jaxtune._isolation.frames.Event`.
EventSink = Callable[[Event], None]


class Relay:
    """An event sink that passes each event on to ``target``, which can be replaced after
    the relay was handed out (a test follows a sweeper's events from some point on)."""

    def __init__(self, target: EventSink) -> None:
        self.target = target

    def __call__(self, event: Event) -> None:
        self.target(event)


#: A config's compile outcome as it becomes known: its id, and its failure or ``None``
#: (or what the engine's own code raised while on it, for the waiter to raise).
Compiled = tuple[str, Failure | BaseException | None]

#: Added to an exception of the engine's own code (a bug), never recorded as a config's
#: failure: a config fails only by what its kernel, JAX's lowering and compiling of it or
#: its run raise.
ENGINE_FAULT = (
    "jaxtune failed in its own sweep code while on config {config}: this is a bug in "
    "jaxtune, not a failure of the config; please report it with this traceback"
)


@dataclasses.dataclass(frozen=True, slots=True)
class Lowering:
    """A config's lowered module, waiting for XLA, and the seconds tracing it took."""

    lowered: Any
    seconds: float


class Compiler:
    """Compiles a task's configs: each one's run (a call on the inputs) and time, or failure."""

    def __init__(self, task: SweepTask, *, emit: EventSink, breakdown: Breakdown) -> None:
        self.task = task
        self.emit = emit
        self.breakdown = breakdown
        self._inputs: tuple[dict[str, Any], ...] | None = None
        self._runs: dict[str, tuple[Run, float]] = {}
        #: Each config's program: its module's name (for a device timer's trace), its
        #: digest (:func:`program_digest`, where its text shows it), twins' executables.
        self.names = Programs(task.plan.configs)
        self._failed: dict[str, Failure] = {}
        #: The exception a config's call raised last (until :meth:`raised` looks).
        self._raised: dict[str, Exception] = {}
        self._thread: threading.Thread | None = None
        self._launched: tuple[list[str], queue.SimpleQueue[Compiled]] | None = None
        #: Each config's calls so far and the count already reported (a cell each).
        self._calls: dict[str, list[int]] = {}
        self.refuse: Refuse | None = checker()  #: see :func:`lower_checked`
        self._store: list[ProgramStore | None] = []  # the task's, once looked for (store_for)

    @property
    def inputs(self) -> tuple[dict[str, Any], ...]:
        if self._inputs is None:
            t = self.task
            with self.breakdown.timed("inputs"):
                self._inputs = make_inputs(t.plan.kernel, t.signature, t.inputs, t.value_sets)
        return self._inputs

    def supply(self, task: SweepTask) -> None:
        """The task with its arrays, once arrived (after a :meth:`launch` for shapes)."""
        self.task, self._inputs = task, None

    def compiled(self, cid: str) -> bool:
        """Whether config ``cid`` compiled here (and has a run)."""
        return cid in self._runs

    def run(self, cid: str) -> Run:
        """Config ``cid``'s run: one call of its executable, blocked until done (or
        started and waited for apart: :class:`Run`)."""
        return self._runs[cid][0]

    def compile_s(self) -> dict[str, float]:
        """Each compiled config's compile time in seconds (tracing and lowering included)."""
        return {cid: run[1] for cid, run in self._runs.items()}

    def raised(self, cid: str) -> Exception | None:
        """What ``cid``'s call raised since the last look: its failure, not the timer's."""
        return self._raised.pop(cid, None)

    def count_calls(self) -> None:
        """Counts each config's calls since the last count into the breakdown."""
        for cid, cell in self._calls.items():
            if cell[0] > cell[1]:
                self.breakdown.count(cid, cell[0] - cell[1])
                cell[1] = cell[0]

    # -- compiling -----------------------------------------------------------------------

    def launch(
        self, configs: Sequence[Config], *, serial: bool, spec: dict[str, Any] | None = None
    ) -> None:
        """Compiles ``configs`` in a background thread (for arguments shaped as ``spec``,
        ``jax.ShapeDtypeStruct`` leaves, while the arrays are still arriving); each outcome
        is queued as known, for :meth:`outcomes`."""
        self.wait()
        if spec is None:
            self.inputs  # noqa: B018 - built here, before the threads start
        done: queue.SimpleQueue[Compiled] = queue.SimpleQueue()
        local_config = _context.snapshot_local()

        def work() -> None:
            with local_config():
                self.compile_all(configs, serial=serial, spec=spec, done=done.put)

        self._thread = threading.Thread(target=work, name="jaxtune-compile", daemon=True)
        self._thread.start()
        self._launched = ([config_id(c) for c in configs], done)

    def outcomes(self, configs: Sequence[Config], *, serial: bool) -> queue.SimpleQueue[Compiled]:
        """The queue of ``configs``' compile outcomes, one each as it becomes known: those
        of a :meth:`launch` of the same configs, else of one begun now (``serial``: done
        before this returns, one step at a time, so that a crash names its config)."""
        ids = [config_id(c) for c in configs]
        if self._launched is None or self._launched[0] != ids:
            self.launch(configs, serial=serial)
        assert self._launched is not None
        done = self._launched[1]
        self._launched = None
        if serial:
            self.wait()
        return done

    def wait(self) -> None:
        """Waits for the background compiling of the last :meth:`launch`, if any."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def compile(self, configs: Sequence[Config], *, serial: bool = False) -> dict[str, Failure]:
        """Compiles ``configs`` now (in parallel threads unless ``serial``); returns failures."""
        self.wait()
        self.inputs  # noqa: B018 - built here, before the threads start
        return self.compile_all(configs, serial=serial, spec=None)

    def compile_all(
        self,
        configs: Sequence[Config],
        *,
        serial: bool,
        spec: dict[str, Any] | None,
        done: Callable[[Compiled], None] | None = None,
    ) -> dict[str, Failure]:
        """Compiles ``configs``: one at a time when ``serial``, else in a pipeline: this
        thread traces and lowers them in turn (Python work that holds the GIL, so a second
        tracing thread would only slow the first and the thread running configs), and XLA
        compiles the lowered modules meanwhile in a pool of threads (work that lets go of
        the GIL), this thread at most :data:`LOWERED_AHEAD` lowered configs per compiling
        thread ahead of them (its waits: ``lowering_paced``)."""
        threads = 1 if serial else (self.task.compile_threads or compile_threads())
        local_config = _context.snapshot_local()
        failures: dict[str, Failure] = {}

        def settle(config: Config, compile_: Callable[[], Failure | None]) -> None:
            cid = config_id(config)
            try:
                with local_config():
                    failure = compile_()
            except BaseException as e:
                # Not the config's failure (those are returned): a fault of the engine's
                # own, or an interrupt. Whoever waits on ``done`` must hear of every
                # config: it gets the exception, and raises it.
                blame_jaxtune(e, cid)
                if done is None:
                    raise
                done((cid, e))
                return
            if failure is not None:
                failures[cid] = failure
            if done is not None:
                done((cid, failure))

        if serial or len(configs) <= 1:
            for config in configs:
                settle(config, functools.partial(self.compile_one, config, spec))
            return failures
        _pipeline(self, configs, spec, threads, settle, local_config)
        return failures

    def lower(self, config: Config, spec: dict[str, Any] | None) -> Lowering | Failure | None:
        """Traces and lowers ``config``: its lowering, its failure, or ``None`` if done before."""
        cid = config_id(config)
        if cid in self._runs or cid in self._failed:
            return self._failed.get(cid)
        lowering = self.inputs if spec is None else (spec,) * (1 + len(self.task.value_sets))
        call = config_call(self.task, config, self.names.module(config).removeprefix("jit_"))

        # A crash report that names the tracing thread pins the crash on this config.
        self.emit(CompileStarted(cid=cid, thread=threading.get_ident()))
        start = time.perf_counter()
        own: BaseException | None = None
        if not self._store:  # a cell: LoweringAhead holds it
            self._store.append(store_for(self.task, lowering))
        try:
            lowered = lower_stored(call, lowering, self.refuse, self._store[0], cid, self.breakdown)
        except _OwnCodeError as e:  # raised below, outside this handler: it is not JAX's
            own = e.fault
        except Exception as e:  # the kernel, or JAX tracing or lowering it, failed
            self.emit(CompileFinished(cid=cid))
            self._failed[cid] = Failure(config=config, stage="compile", reason=_unlowered(e))
            return self._failed[cid]
        if own is not None:
            self.emit(CompileFinished(cid=cid))
            blame_jaxtune(own, cid)
            raise own
        self.names.note(config, lowered)
        self.breakdown.add("lowering", seconds := time.perf_counter() - start)
        return Lowering(lowered=lowered, seconds=seconds)

    def compile_one(
        self, config: Config, spec: dict[str, Any] | None = None, lowered: Lowering | None = None
    ) -> Failure | None:
        """Compiles ``config`` (lowered first unless ``lowered``); its failure or ``None``."""
        cid = config_id(config)
        if lowered is None:
            got = self.lower(config, spec)
            if not isinstance(got, Lowering):
                return got
            lowered = got
        else:  # a compiling thread took over: a crash in it is this config's
            self.emit(CompileStarted(cid=cid, thread=threading.get_ident()))
        owner = self.names.owner(cid)
        if owner is not None and (shared := self._share(config, lowered, *owner)) is not None:
            return shared.failure
        try:
            return self._compile_lowered(config, lowered)
        finally:
            self.names.compiled(cid)

    def _compile_lowered(self, config: Config, lowered: Lowering) -> Failure | None:
        cid = config_id(config)
        start = time.perf_counter()
        try:
            compiled = lowered.lowered.compile()
        except Exception as e:  # XLA failed to compile the config's module
            self.emit(CompileFinished(cid=cid))
            self._failed[cid] = Failure(config=config, stage="compile", reason=reason(e))
            if self._store and self._store[0] is not None:
                self._store[0].remember_failure(cid, self._failed[cid].reason)
            return self._failed[cid]
        seconds = lowered.seconds + time.perf_counter() - start
        self.breakdown.add("compile_threads", seconds)
        self.emit(CompileFinished(cid=cid, seconds=seconds))
        if seconds > self.task.plan.timeout_s:
            self._failed[cid] = too_slow(config, "compiling", seconds, self.task.plan.timeout_s)
            return self._failed[cid]
        calls = self._calls.setdefault(cid, [0, 0])
        run = Run(cid, compiled, inputs=lambda: self.inputs, raised=self._raised, calls=calls)
        self._runs[cid] = (run, seconds)
        return None

    def _share(
        self, config: Config, lowered: Lowering, owner: str, done: threading.Event
    ) -> _Shared | None:
        """``config`` given the executable (or the compile failure) of ``owner``, a config
        of the same program, once it is compiled: XLA would build the same executable
        again. ``None`` where ``owner`` ended with neither (its compile raised: not the
        config's failure), and ``config`` compiles its own."""
        # ``owner`` took its program from a compiling thread that is running it, so this
        # wait cannot hold up its compile.
        done.wait()
        cid = config_id(config)
        if (failed := self._failed.get(owner)) is not None:
            self._failed[cid] = dataclasses.replace(failed, config=config)
            self.emit(CompileFinished(cid=cid))
            return _Shared(self._failed[cid])
        if owner not in self._runs:
            return None
        calls = self._calls.setdefault(cid, [0, 0])
        self._runs[cid] = (self._runs[owner][0].twin(cid, calls), lowered.seconds)
        self.breakdown.add("compile_threads", lowered.seconds)
        self.emit(CompileFinished(cid=cid, seconds=lowered.seconds))
        return _Shared(None)


@dataclasses.dataclass(frozen=True, slots=True)
class _Shared:
    """What a twin got from the config that compiled its program: its failure, or none."""

    failure: Failure | None


def _pipeline(
    compiler: Compiler,
    configs: Sequence[Config],
    spec: dict[str, Any] | None,
    threads: int,
    settle: Callable[[Config, Callable[[], Failure | None]], None],
    local_config: Callable[[], contextlib.AbstractContextManager[None]],
) -> None:
    """:meth:`Compiler.compile_all`'s pipeline: this thread lowers ``configs`` in the
    order :class:`LoweringAhead` gives, at most :data:`LOWERED_AHEAD` per compiling thread
    ahead of ``threads`` threads that compile them; ``settle`` reports each outcome, and
    ``local_config`` restores the caller's thread-local JAX options for each lowering."""
    ahead = LoweringAhead(compiler, configs, compiler._store)
    threads_ = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="jaxtune-compile")
    slots = _Slots(threads * LOWERED_AHEAD, compiler.breakdown)
    with threads_ as ex, contextlib.closing(ahead):
        pending, order = [], ahead.order()
        checks_prepared = False
        # The slot first: which config comes next is decided once it can be lowered
        # (what the lowering processes told of by then counts).
        while True:
            slots.take()
            if (index := next(order, None)) is None:
                slots.give()
                break
            config = configs[index]
            try:
                with local_config():
                    lowered = compiler.lower(config, spec)
            except BaseException as e:  # not the config's: settle raises or hands it on
                slots.give()
                settle(config, functools.partial(_reraise, e))
                continue
            if isinstance(lowered, Lowering):
                job = functools.partial(compiler.compile_one, config, spec, lowered)
                pending.append(ex.submit(slots.freeing(settle), config, job))
                if not checks_prepared:  # the first config's outputs show the check's
                    checks_prepared = True
                    check = compiler.task.check
                    prepare_ = _in(local_config, _prepare_checks)
                    pending.append(ex.submit(prepare_, lowered.lowered, check))
            else:
                slots.give()
                settle(config, functools.partial(_given, lowered))
        for future in pending:
            future.result()


def _prepare_checks(lowered: Any, check: Any) -> None:
    """The check's comparisons compiled ahead for ``lowered``'s outputs
    (:func:`~.check.prepare`); nothing where it does not say what they are."""
    try:
        outputs = lowered.out_info
    except Exception:
        return
    prepare(outputs, check)


def _in(
    local_config: Callable[[], contextlib.AbstractContextManager[None]], fn: Callable[..., None]
) -> Callable[..., None]:
    """``fn``, run with the caller's thread-local JAX options (``local_config``)."""

    def run(*args: Any) -> None:
        with local_config():
            fn(*args)

    return run


#: How many lowered configs per compiling thread the lowering thread keeps waiting for
#: XLA at most. Lowering (and loading kept programs) holds the GIL, which the compiling
#: threads need between their C++ parts: run far ahead, it slows every compile at the
#: start (twelve threads on a TPU v5e host finished 3.3 configs a second while it loaded
#: 329 kept programs, against 7-9 after) and then leaves nothing to overlap.
LOWERED_AHEAD = 2


class _Slots:
    """The lowering thread's pace: a slot taken before a config is lowered, given back once
    a compiling thread takes the config up (or where it is not compiled); the seconds the
    lowering thread waits for one are ``lowering_paced`` in the breakdown."""

    def __init__(self, count: int, breakdown: Breakdown) -> None:
        self._free = threading.Semaphore(count)
        self._breakdown = breakdown

    def take(self) -> None:
        if self._free.acquire(blocking=False):
            return
        start = time.perf_counter()
        self._free.acquire()
        self._breakdown.add("lowering_paced", time.perf_counter() - start)

    def give(self) -> None:
        self._free.release()

    def freeing(self, fn: Callable[..., None]) -> Callable[..., None]:
        """``fn``, giving a slot back as it starts."""

        def started(*args: Any) -> None:
            self.give()
            fn(*args)

        return started


class Run:
    """One compiled config's call: ``run()`` calls it and waits for its outputs;
    :meth:`start` only starts a call and :meth:`wait` waits for what it returned, so a
    device timer can keep several calls in flight (:class:`~.timers.InFlight`). Each
    call is counted, and what it first raised (when started or waited for) is kept as
    the config's own failure, told from the timer's by
    :meth:`Compiler.raised`."""

    __slots__ = ("_calls", "_cid", "_compiled", "_inputs", "_raised")

    def __init__(
        self,
        cid: str,
        compiled: Any,
        *,
        inputs: Callable[[], Any],
        raised: dict[str, Exception],
        calls: list[int],
    ) -> None:
        self._cid, self._compiled, self._inputs = cid, compiled, inputs
        self._raised, self._calls = raised, calls

    def twin(self, cid: str, calls: list[int]) -> Run:
        """A run of this executable for config ``cid``, a config of the same program: its
        calls and failures counted as ``cid``'s."""
        return Run(cid, self._compiled, inputs=self._inputs, raised=self._raised, calls=calls)

    def __call__(self) -> Any:
        return self.wait(self.start())

    def start(self) -> Any:
        """Starts one call; its outputs, perhaps not computed yet."""
        self._calls[0] += 1  # a cell, not a lock: this runs inside the timed loops
        try:
            # The inputs are looked up on each call: compiled early, they arrive
            # afterwards (and are made before the first run, outside it).
            return self._compiled(self._inputs())
        except Exception as e:
            self._raised.setdefault(self._cid, e)  # the first: what a timer raises of it
            raise

    def wait(self, out: Any) -> Any:
        """Waits until ``out`` (a call's outputs) is computed."""
        try:
            return block(out)
        except Exception as e:
            self._raised.setdefault(self._cid, e)  # the first: what a timer raises of it
            raise


#: Checks a config's traced program (its jaxpr): why Mosaic would refuse it, or ``None``.
Refuse = Callable[[Any], str | None]


class RefusedError(Exception):
    """A config refused from its traced program (:mod:`.refusals`): its reason."""


def lower_checked(call: Callable[..., Any], args: Any, refuse: Refuse | None) -> Any:
    """``call`` traced and lowered for ``args``; ``refuse`` (``None`` where nothing is
    refused: not a TPU) checks the traced program in between, so that a config Mosaic
    would refuse costs a trace, not a lowering and compile.

    Raises:
        RefusedError: ``refuse`` gave a reason.
    """
    traced = jax.jit(call).trace(args)
    why = None if refuse is None else refuse(traced.jaxpr)
    if why:
        raise RefusedError(why)
    return traced.lower()


class LoweringAhead:
    """The lowering processes (:mod:`.lowering_pool`) of one pipelined compile of
    ``configs``, and the order in which this thread lowers the configs (or loads what the
    processes stored): started once the first config is lowered here, for those of the rest
    neither compiled nor kept (``auto``: only where they would take long at the first
    one's pace)."""

    def __init__(
        self, compiler: Compiler, configs: Sequence[Config], store: list[ProgramStore | None]
    ) -> None:
        self.compiler, self.configs, self.store = compiler, configs, store
        self.pool: LoweringPool | None = None

    def order(self) -> Iterator[int]:
        """The configs' indices, each once, in the order this thread lowers them: the
        first, which starts the processes; then, while no process has told of a config
        yet (their start: importing JAX and the kernel, 9 s for twelve of them beside
        Tokamax's ragged_dot on a TPU v5e host), the
        last config left, which the processes would reach last; after that the earliest
        config a process told of, else the next one, waited for (``lowering_wait`` in the
        breakdown) at most as long as lowering it here took the first, then lowered here.
        Until one of the processes' programs matched a fresh lowering here, only a kept
        program is taken (their refusals count only after that match, and Tokamax's
        ragged_dot's first 20-odd configs are refusals, each lowered again here while the
        compiling threads idled 6 s), and with none told yet the last config left is
        lowered here.
        The processes are closed once the stored programs are found not to match the code,
        or once none will tell (they ended, or one hung)."""
        c = self.compiler
        if not self.configs:
            return
        first_at = time.perf_counter()
        yield 0
        store = self.store[0] if self.store else None  # looked for as the first was lowered
        left = list(range(1, len(self.configs)))
        first_s = time.perf_counter() - first_at
        if left and store is None:
            say_none_without_serialising()
        if left and store is not None:
            todo = [
                self.configs[i]
                for i in left
                if not c.compiled(cid := config_id(self.configs[i])) and not store.has(cid)
            ]
            self.pool = LoweringPool.start(
                c.task, store, todo, refuse=c.refuse is not None, first_s=first_s
            )
            if self.pool is not None:
                c.breakdown.add("lowering_wait", 0.0)  # the phase shows processes started
        ids = [config_id(config) for config in self.configs]
        while left:
            pool = self.pool
            if pool is not None and store is not None and store.trusted is False:
                self.close()
                pool = None
            if pool is None:
                yield left.pop(0)
                continue
            told = pool.told()
            if not told:
                if pool.running():
                    yield left.pop()  # the processes are starting: the last, lowered here
                    continue
                self.close()  # every process ended without telling: the rest lowered here
                continue
            ready = None
            if store is not None and store.trusted is None:
                # Only a kept program can earn the processes' refusals trust.
                ready = next((k for k, i in enumerate(left) if told.get(ids[i]) == "kept"), None)
                if ready is None and pool.running():
                    yield left.pop()
                    continue
            if ready is None:
                ready = next((k for k, i in enumerate(left) if ids[i] in told), None)
            if ready is not None:
                yield left.pop(ready)
                continue
            start = time.perf_counter()
            got = pool.wait(ids[left[0]], max(first_s, 0.05))
            c.breakdown.add("lowering_wait", time.perf_counter() - start)
            if got == "ended":  # none will tell: the rest is lowered here
                self.close()
            yield left.pop(0)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def store_for(task: SweepTask, args: Any) -> ProgramStore | None:
    """``task``'s stored programs for arguments ``args`` (:mod:`.program_store`), ``None``
    where they are off or the kernel's code has no digest."""
    plan = task.plan
    code = KernelCode(task.fn).digest
    key = task_key(kernel=plan.kernel, key=plan.key, code=code, timing=plan.timing, args=args)
    return ProgramStore.for_task(key)


def lower_stored(
    call: Callable[..., Any],
    args: Any,
    refuse: Refuse | None,
    store: ProgramStore | None,
    cid: str,
    breakdown: Breakdown,
) -> Any:
    """:func:`lower_checked` where ``store`` is ``None``; else as it, taking config ``cid``'s program from ``store`` where a
    previous sweep kept it (the first one taken is also lowered afresh and compared, and
    on a difference none of ``store`` is used: :mod:`.program_store`), else lowering it
    through ``jax.export`` and keeping it (:func:`export_checked`)."""
    if store is None:
        return lower_checked(call, args, refuse)
    if (why := store.failure(cid)) is not None:
        raise RememberedError(f"{why} {REMEMBERED}")
    try:
        return _lower_stored(call, args, refuse, store, cid, breakdown)
    except RememberedError:
        raise
    except RefusedError as e:
        store.remember_failure(cid, str(e))
        raise


#: Added to a failure taken from an earlier sweep's (:meth:`.ProgramStore.failure`).
REMEMBERED = (
    "(found before for the same program, by an earlier sweep or a lowering process: not "
    "traced or compiled again; `jaxtune cache clear` forgets it)"
)


class RememberedError(RefusedError):
    """A config's failure taken from an earlier sweep of the same program."""


def _lower_stored(
    call: Callable[..., Any],
    args: Any,
    refuse: Refuse | None,
    store: ProgramStore,
    cid: str,
    breakdown: Breakdown,
) -> Any:
    name = call.__name__
    blob = store.load(cid)
    if blob is not None:
        start = time.perf_counter()
        try:
            old = from_exported(jax.export.deserialize(bytearray(blob)), name, args)
        except Exception:  # not readable by this JAX: lowered afresh
            old = None
        if old is not None and store.trusted:
            breakdown.add("lowering_kept", time.perf_counter() - start)
            return old
        if old is not None and store.trusted is None:
            # The first one kept: is it what the code lowers to now?
            fresh = export_checked(call, args, refuse, store, cid)
            digests = program_digest(old, name), program_digest(fresh, name)
            store.trusted = digests[0] is not None and digests[0] == digests[1]
            if not store.trusted:
                store.forget_failures()
            return fresh
    return export_checked(call, args, refuse, store, cid)


#: The name a stored program is exported under: the same for every config and sweep, so
#: that two sweeps' programs compare equal (the caller's wrapper carries the config's).
_KEPT_NAME = "jaxtune_program"


def export_checked(
    call: Callable[..., Any], args: Any, refuse: Refuse | None, store: ProgramStore, cid: str
) -> Any:
    """As :func:`lower_checked`, lowering through ``jax.export`` and keeping the program
    in ``store`` under ``cid``; a kernel ``jax.export`` cannot serialise is lowered
    directly (and no longer exported for this task)."""
    if not store.exportable:
        return lower_checked(call, args, refuse)
    name = call.__name__
    try:
        exported, blob = export_program(call, args, refuse)
    except UnexportedError:
        # Lowering directly raises what is the config's own failure; where it does not,
        # only the export failed: the task's other configs are lowered directly.
        def direct(sets: Any) -> Any:
            return call(sets)

        direct.__name__ = direct.__qualname__ = name
        lowered = jax.jit(direct).trace(args).lower()
        store.exportable = False
        return lowered
    store.save(cid, blob)
    return from_exported(exported, name, args)


class UnexportedError(Exception):
    """``jax.export`` failed where tracing did not (see :func:`export_program`)."""


def export_program(
    call: Callable[..., Any],
    args: Any,
    refuse: Refuse | None,
    platforms: Sequence[str] | None = None,
) -> tuple[Any, bytes]:
    """``call`` traced for ``args``, checked by ``refuse`` and exported (for ``platforms``,
    else this process's backend) under the neutral name every stored program has: the
    ``jax.export.Exported`` and its serialised bytes. ``call`` is renamed.

    Raises:
        RefusedError: ``refuse`` gave a reason.
        UnexportedError: tracing went through but exporting or serialising failed (the
            exception is its cause).
    """
    call.__name__ = call.__qualname__ = _KEPT_NAME
    jitted = jax.jit(call)
    traced = jitted.trace(args)
    why = None if refuse is None else refuse(traced.jaxpr)
    if why:
        raise RefusedError(why)
    try:
        exporting = jax.export.export(jitted, platforms=platforms)
        exported = exporting(args)  # the trace above is reused
        return exported, bytes(exported.serialize())
    except Exception as e:
        raise UnexportedError() from e


def config_call(task: SweepTask, config: Config, name: str) -> Callable[[Any], Any]:
    """The function a sweep compiles for ``config``: the kernel called with the config on
    each value set's dynamic arguments (:func:`mixed`), its backward pass too where the
    task times ``vjp``; named ``name``."""
    sig, fn = task.signature, task.fn

    def forward(dyn: dict[str, Any]) -> Any:
        with _own_code():
            args, kwargs = sig.call_arguments(replace=dyn)
        return fn(*args, **kwargs, **config)

    call = mixed(with_backward(forward) if task.plan.timing == "vjp" else forward)
    call.__name__ = call.__qualname__ = name
    return call


def from_exported(exported: Any, name: str, args: Any) -> Any:
    """The lowering of a call of ``exported`` (a ``jax.export.Exported``) for ``args``,
    as a module named for the config (``name``: ``jaxtune_<n>``)."""

    def run(sets: Any) -> Any:
        return exported.call(sets)

    run.__name__ = run.__qualname__ = name
    return jax.jit(run).trace(args).lower()


def _unlowered(e: Exception) -> str:
    """The reason of a config whose tracing or lowering raised ``e`` (or was refused)."""
    return str(e) if isinstance(e, RefusedError) else f"while tracing or lowering: {reason(e)}"


def mixed(call: Callable[[dict[str, Any]], Any]) -> Callable[[Sequence[dict[str, Any]]], Any]:
    """``call`` over value sets: one set is the call itself; several (a recorded mix) are
    called one after the other in one program, each set's inputs held back until the
    previous call's outputs exist (XLA may not run them side by side), and timed as one."""

    def over(sets: Sequence[dict[str, Any]]) -> Any:
        if len(sets) == 1:
            return call(sets[0])
        outs: list[Any] = []
        for values in sets:
            if outs:
                values, _ = jax.lax.optimization_barrier((values, outs[-1]))
            outs.append(call(values))
        return outs

    return over


def too_slow(config: Config, step: str, seconds: float, limit_s: float) -> Failure:
    """The failure of a config whose ``step`` took ``seconds``, over ``limit_s``."""
    return Failure(
        config=config,
        stage="timeout",
        reason=f"{step} took {seconds:.1f} s, over the {limit_s:g} s limit "
        "(JAXTUNE_TIMEOUT / timeout=)",
    )


def blame_jaxtune(e: BaseException, cid: str) -> None:
    """Adds :data:`ENGINE_FAULT` to a fault of the engine's own code (once; an interrupt
    or exit is no fault and gets nothing)."""
    note = ENGINE_FAULT.format(config=cid)
    if isinstance(e, Exception) and note not in getattr(e, "__notes__", ()):
        e.add_note(note)


def _given(outcome: Failure | None) -> Failure | None:
    return outcome


def _reraise(e: BaseException) -> Failure | None:
    raise e


class _OwnCodeError(Exception):
    """Carries a fault of the engine's own code out of JAX's tracing of a config's call
    (``fault``), so that it is not taken for the config's failure to lower."""

    def __init__(self, fault: Exception) -> None:
        super().__init__(str(fault))
        self.fault = fault


@contextlib.contextmanager
def _own_code() -> Iterator[None]:
    """Marks the engine's own code inside a config's traced call (see :class:`_OwnCodeError`)."""
    try:
        yield
    except Exception as e:
        raise _OwnCodeError(e) from e


#: The most lowered configs XLA compiles at once by default, however many cores.
MAX_COMPILE_THREADS = 16


def compile_threads(children: int = 1) -> int:
    """How many lowered configs XLA compiles at once by default: the usable cores, shared
    among ``children`` sweep children compiling at once (one per device), less one each
    for the thread that runs configs; at least 1, at most :data:`MAX_COMPILE_THREADS`. A
    2-core machine gets 1, a 13-core TPU v5e host 12 (Tokamax's ragged_dot proposes 540
    configs: a cap of 4 left most of its cores idle).

    Tracing and lowering stay on one thread (Python work that holds the GIL), which feeds
    the compiling threads (XLA's compile lets go of the GIL): on a 2-core machine two
    threads that each traced and compiled made every compile and every run slower (JAX's
    flash attention, 9 configs: compile threads 188 s against 63 s, the sweep 1.38x
    slower). A compiling thread that the lowering thread cannot keep busy waits. Configs
    run their check while others compile, but none is timed until all compiled."""
    return max(1, min(MAX_COMPILE_THREADS, usable_cores() // max(1, children) - 1))
