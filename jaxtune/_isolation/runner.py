"""Where a sweep runs: in a re-exec'd child process (default) or in this process.

The child starts with its environment (flags, ``JAX_PLATFORMS``, device visibility,
``PYTHONPATH`` from ``sys.path``) set before it imports JAX, in its own process group, and
talks over two pipes in msgpack frames. A config that kills the child (signal, abort,
``os._exit``, out of memory) or outlives ``JAXTUNE_TIMEOUT`` is recorded as failed with
the signal or exit status and the tail of the child's stderr; the runner kills the whole
process group, starts a new child and goes on with the remaining configs.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .. import _errors
from .._errors import JaxtuneWarning, SweepError
from .._flags import child_env
from .._tuning.progress import Progress
from .._tuning.result import Failure, Measurement, measurement_from_dict
from .._tuning.space import config_id
from .._tuning.sweep import SweepOutcome, SweepTask, finish, leaders, ordered, run_sweep
from . import context as _context
from .process import (
    _POOL,
    _POOL_LOCK,
    ChildProcess,
    _normalise,
    _parent_backend,
    _python_path,
)
from .process import shutdown_children as shutdown_children
from .wire import NotTransportable, encode_value

__all__ = [
    "ChildProcess",
    "InlineRunner",
    "ProcessRunner",
    "Runner",
    "default_runner",
    "shutdown_children",
]

Result = Measurement | Failure

#: Extra seconds past a config's timeout before the child is killed (the child itself
#: reports a soft timeout first when the slow step returns).
GRACE = 2.0

_TPU_HELD = (
    "this process already opened the TPU, and only one process can hold a TPU chip, so "
    "the sweep runs here without crash isolation. To tune with isolation, run your program "
    "under `jaxtune tune -- python your_script.py`, or set JAXTUNE_ISOLATION=inline to "
    "silence this message."
)


class Runner(Protocol):
    """Runs one sweep and returns its outcome (or raises ``TuningFailedError``)."""

    def sweep(self, task: SweepTask) -> SweepOutcome: ...


class InlineRunner:
    """Runs the sweep in this process, in a fresh thread.

    The thread matters: a sweep may start while JAX is tracing the caller under ``jax.jit``,
    and JAX's trace state is per thread, so work done in a new thread executes for real
    instead of being staged into the caller's trace; the caller's thread-local JAX
    configuration is carried over. There is no crash isolation, and a timeout is noticed
    only once the slow step returns.
    """

    def sweep(self, task: SweepTask) -> SweepOutcome:
        local_config = _context.capture()

        def work() -> SweepOutcome:
            with local_config():
                return run_sweep(task)

        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxtune-sweep") as ex:
            return ex.submit(work).result()


class ProcessRunner:
    """Runs sweeps in a long-lived child process, restarting it after a crash or hang.

    ``platform`` defaults to the backend this process uses (or ``JAX_PLATFORMS``);
    ``env`` adds variables (extra ``XLA_FLAGS`` merge with the user's); ``memory_limit``
    caps the child's address space in bytes. ``device`` pins the child to one accelerator
    (``CUDA_VISIBLE_DEVICES`` on GPU; ``TPU_VISIBLE_CHIPS`` and the process-bounds variables
    on TPU); ``devices`` runs one child per listed device, each measuring a share of the
    configs at the same time (on CPU each "device" is simply another child process).
    """

    def __init__(
        self,
        *,
        platform: str | None = None,
        env: Mapping[str, str] | None = None,
        memory_limit: int | None = None,
        device: int | None = None,
        devices: Sequence[int] | None = None,
        profiling: Mapping[str, bool] | None = None,
    ) -> None:
        self.profiling = dict(profiling) if profiling is not None else None
        self.platform = platform
        self.extra_env = dict(env or {})
        self.memory_limit = memory_limit
        self.device = device
        self.devices = list(devices) if devices else None
        #: The ready message of the last child this runner used (platform, device kind...).
        self.ready: dict[str, Any] | None = None

    # -- the child ---------------------------------------------------------------------

    def _expected_platform(self) -> str | None:
        if self.platform:
            return _normalise(self.platform)
        parent = _parent_backend()
        if parent:
            return _normalise(parent)
        first = os.environ.get("JAX_PLATFORMS", "").split(",")[0].strip()
        return _normalise(first) if first else None

    def environment(self) -> dict[str, str]:
        """The child's environment."""
        platform = self._expected_platform()
        extra = dict(self.extra_env)
        xla = extra.pop("XLA_FLAGS", "")
        libtpu = extra.pop("LIBTPU_INIT_ARGS", "")
        env = child_env(
            platform or "cpu",
            xla_flags=xla.split(),
            libtpu_args=libtpu.split(),
            profiling=self.profiling is not None,
            llo=bool((self.profiling or {}).get("llo")),
            custom_call_tracing=bool((self.profiling or {}).get("custom_call_tracing")),
            check_binary=self.profiling is not None,
        )
        if platform is None:
            env.pop("JAX_PLATFORMS", None)
            if "JAX_PLATFORMS" in os.environ:
                env["JAX_PLATFORMS"] = os.environ["JAX_PLATFORMS"]
        env.update(extra)
        env["PYTHONPATH"] = _python_path()
        env["JAXTUNE_ISOLATION"] = "inline"
        env["JAXTUNE_PARENT_PID"] = str(os.getpid())
        if self.memory_limit:
            env["JAXTUNE_CHILD_MEMORY_LIMIT"] = str(int(self.memory_limit))
        if self.device is not None:
            env["JAXTUNE_DEVICE"] = str(self.device)
        if self.device is not None and platform == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = str(self.device)
        if self.device is not None and platform == "tpu":
            env["TPU_VISIBLE_CHIPS"] = str(self.device)
            env["TPU_PROCESS_BOUNDS"] = "1,1,1"
            env["TPU_CHIPS_PER_PROCESS_BOUNDS"] = "1,1,1"
        return env

    def _child(self) -> ChildProcess:
        env = self.environment()
        key = tuple(sorted(env.items()))
        with _POOL_LOCK:
            child = _POOL.get(key)
            if child is not None and child.alive():
                self.ready = child.ready
                return child
            if child is not None:
                child.kill()
            child = ChildProcess(env)
            expected = self._expected_platform()
            got = _normalise(child.ready["platform"])
            if expected and got != expected:
                child.close()
                raise SweepError(
                    f"the jaxtune child came up on {got!r}, expected {expected!r} like this "
                    "process; check JAX_PLATFORMS and the accelerator's visibility variables."
                )
            _POOL[key] = child
            self.ready = child.ready
            return child

    def _discard(self, child: ChildProcess) -> None:
        with _POOL_LOCK:
            for key, value in list(_POOL.items()):
                if value is child:
                    del _POOL[key]
        child.kill()

    # -- a sweep -------------------------------------------------------------------------

    def sweep(self, task: SweepTask) -> SweepOutcome:
        if _normalise(_parent_backend()) == "tpu" and self._expected_platform() == "tpu":
            _warn_once(("tpu", task.kernel), f"jaxtune: tuning {task.kernel}: {_TPU_HELD}")
            return InlineRunner().sweep(task)
        try:
            return self.run_request(task, _request(task))
        except NotTransportable as e:
            _warn_once(
                ("inline", task.kernel),
                f"jaxtune: {task.kernel} cannot be tuned in a child process: {e}. It is tuned "
                "in this process instead, without crash isolation. Define the kernel at module "
                "level with plain array/static arguments, or set JAXTUNE_ISOLATION=inline to "
                "silence this warning.",
            )
            return InlineRunner().sweep(task)

    def run_request(self, task: SweepTask, request: dict[str, Any]) -> SweepOutcome:
        """Runs a prepared request (``jaxtune tune`` builds them from a recording); only the
        task's kernel id, key, configs, default, timeout and timing options are used here."""
        progress = Progress(f"{task.kernel} {task.signature.key}", len(task.configs), task.verbose)
        order = ordered(task)
        devices = list(self.devices or [])
        if len(devices) > 1:
            results = self._measure_on_devices(task, request, progress, order, devices)
        else:
            results = self._measure_all(task, request, progress, order)
        todo = leaders(results, task.options)
        if todo:
            # The leaders are re-timed together on one device, so they compare fairly.
            first = self._on_device(devices[0]) if devices else self
            retime = {**request, "op": "retime", "todo": todo}
            results.update(first._exchange(task, retime, progress=None)[1])
        outcome = finish(task, results)
        progress.finish(outcome)
        return outcome

    def _measure_all(
        self,
        task: SweepTask,
        request: dict[str, Any],
        progress: Progress,
        order: list[dict[str, Any]],
    ) -> dict[str, Result]:
        results: dict[str, Result] = {}
        serial = False
        for _ in range(2 * len(order) + 4):
            pending = [c for c in order if config_id(c) not in results]
            if not pending:
                return results
            reference = _reference(order, results, task.default)
            best = [
                m.min_us for m in results.values() if isinstance(m, Measurement) and not m.dropped
            ]
            message = {
                **request,
                "op": "measure",
                "todo": pending,
                "reference": reference,
                "best_us": min(best) if best else None,
                "serial": serial,
            }
            crashed, got = self._exchange(task, message, progress=progress)
            results.update(got)
            if crashed == "serial":
                serial = True
        raise SweepError(
            f"the sweep of {task.kernel} kept losing its child process; results so far: "
            f"{ {k: type(v).__name__ for k, v in results.items()} }"
        )

    def _lost(
        self,
        task: SweepTask,
        child: ChildProcess,
        offset: int,
        *,
        hung: bool,
        compiling: Mapping[str, float],
        running: tuple[str, float] | None,
        by_id: Mapping[str, dict[str, Any]],
        got: dict[str, Result],
        progress: Progress | None,
    ) -> tuple[str | None, dict[str, Result]]:
        """The child crashed or hung: kill it, and blame the config in flight if there is
        exactly one; ``"serial"`` asks for one-at-a-time compilation to find the culprit."""
        if hung:
            how = (
                f"no answer within the {task.timeout_s:g} s limit (JAXTUNE_TIMEOUT / "
                "timeout=); the child was killed"
            )
            self._discard(child)
        else:
            how = f"the child process {child.describe_exit()}"
            self._discard(child)
        tail = child.stderr_tail(offset)
        suspects = _suspects(compiling, running, hung=hung, timeout_s=task.timeout_s)
        if len(suspects) == 1:
            cid = suspects[0]
            failure = Failure(
                config=by_id[cid],
                stage="timeout" if hung else "crash",
                reason=f"{how}; stderr: {tail}",
            )
            got[cid] = failure
            if progress is not None and cid in {config_id(c) for c in task.configs}:
                progress.update(failure)
            return "restart", got
        if suspects:
            return "serial", got
        raise SweepError(
            f"the jaxtune child died outside any config of {task.kernel} ({how}); stderr: {tail}"
        )

    def _on_device(self, device: int) -> ProcessRunner:
        return ProcessRunner(
            platform=self.platform,
            env=self.extra_env,
            memory_limit=self.memory_limit,
            device=device,
        )

    def _measure_on_devices(
        self,
        task: SweepTask,
        request: dict[str, Any],
        progress: Progress,
        order: list[dict[str, Any]],
        devices: list[int],
    ) -> dict[str, Result]:
        """One child per device, each measuring its share of the configs at once; the
        default (the reference) is measured on the first device."""
        shares: list[list[dict[str, Any]]] = [[order[0]]] + [[] for _ in devices[1:]]
        for i, config in enumerate(order[1:]):
            shares[i % len(devices)].append(config)
        runners = [self._on_device(d) for d in devices]
        with concurrent.futures.ThreadPoolExecutor(len(devices)) as ex:
            parts = list(
                ex.map(
                    lambda pair: pair[0]._measure_all(task, request, progress, pair[1]),
                    [(r, share) for r, share in zip(runners, shares, strict=True) if share],
                )
            )
        results: dict[str, Result] = {}
        for part in parts:
            results.update(part)
        return results

    def _exchange(
        self,
        task: SweepTask,
        message: dict[str, Any],
        *,
        progress: Progress | None,
    ) -> tuple[str | None, dict[str, Result]]:
        """Sends one request and follows its events until ``done``, a crash or a hang.

        Returns ``(None, results)`` when the request finished; on a crash or hang, the
        failures it could attribute, and ``"serial"`` when it could not tell which of
        several configs compiling in parallel was at fault.
        """
        in_space = {config_id(c) for c in task.configs}
        child = self._child()
        with child.lock:
            offset = child.log_size()
            got: dict[str, Result] = {}
            compiling: dict[str, float] = {}
            running: tuple[str, float] | None = None
            by_id = {config_id(c): dict(c) for c in message["todo"]}
            if message.get("reference"):
                by_id.setdefault(config_id(message["reference"]), dict(message["reference"]))
            try:
                child.send(message)
            except OSError:
                self._discard(child)
                return "restart", got
            while True:
                starts = list(compiling.values()) + ([running[1]] if running else [])
                timeout = None
                if starts:
                    timeout = max(0.0, min(starts) + task.timeout_s + GRACE - time.monotonic())
                try:
                    msg = child.reader.read(timeout=timeout)
                except EOFError:
                    msg = "eof"
                if msg is None or msg == "eof":
                    return self._lost(
                        task,
                        child,
                        offset,
                        hung=msg is None,
                        compiling=compiling,
                        running=running,
                        by_id=by_id,
                        got=got,
                        progress=progress,
                    )
                kind = msg.get("t")
                if kind == "done":
                    got.update({k: measurement_from_dict(v) for k, v in msg["results"].items()})
                    return None, got
                if kind == "error" and msg.get("type") == "NotTransportable":
                    raise NotTransportable(msg["message"])
                if kind == "error":
                    error_type = getattr(_errors, str(msg.get("type")), SweepError)
                    if not (isinstance(error_type, type) and issubclass(error_type, Exception)):
                        error_type = SweepError
                    raise error_type(msg["message"])
                if kind != "event":
                    continue
                cid, event = msg["cid"], msg["kind"]
                if event == "compile_start":
                    compiling[cid] = time.monotonic()
                elif event == "compiled":
                    compiling.pop(cid, None)
                elif event == "run_start":
                    running = (cid, time.monotonic())
                elif event == "result":
                    running = None
                    result = measurement_from_dict(msg["data"])
                    got[cid] = result
                    if progress is not None and cid in in_space:
                        progress.update(result)


def _suspects(
    compiling: Mapping[str, float],
    running: tuple[str, float] | None,
    *,
    hung: bool,
    timeout_s: float,
) -> list[str]:
    """The configs that may have killed or hung the child."""
    if running is not None:
        return [running[0]]
    if hung:
        now = time.monotonic()
        late = [c for c, t in compiling.items() if now - t >= timeout_s]
        return late or list(compiling)
    return list(compiling)


def _reference(
    order: list[dict[str, Any]], results: Mapping[str, Result], default: dict[str, Any]
) -> dict[str, Any] | None:
    """The config whose output others are checked against: the default unless it failed,
    else the first config that was measured successfully (None: the child picks the first
    that runs)."""
    if not isinstance(results.get(config_id(default)), Failure):
        return dict(default)
    for config in order:
        if isinstance(results.get(config_id(config)), Measurement):
            return config
    return None


def _kernel_ref(task: SweepTask) -> dict[str, Any]:
    return {**_function_ref(task.fn), "kernel": task.kernel}


def _function_ref(fn: Any) -> dict[str, Any]:
    """``module``, ``qualname`` and, for ``__main__``, the script ``path`` of a function.

    Raises:
        NotTransportable: the function cannot be re-imported in another process.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module or "<locals>" in qualname or "<lambda>" in qualname:
        raise NotTransportable("it is defined inside a function (a closure or lambda)")
    path = None
    if module == "__main__":
        path = getattr(sys.modules.get("__main__"), "__file__", None)
        if not path:
            raise NotTransportable("it is defined in an interactive session or notebook")
        path = os.path.abspath(path)
    else:
        # Where the module came from, for a child that cannot import it by name (a test
        # module collected with pytest's importlib mode, a module added to sys.path late).
        path = getattr(sys.modules.get(module), "__file__", None)
    return {"module": module, "qualname": qualname, "path": path}


def _request(task: SweepTask) -> dict[str, Any]:
    args, kwargs = task.signature.call_arguments()
    return {
        "task_id": uuid.uuid4().hex,
        "ref": _kernel_ref(task),
        "args": encode_value(tuple(args)),
        "kwargs": encode_value(dict(kwargs)),
        "key": task.signature.key,
        "configs": [dict(c) for c in task.configs],
        "default": dict(task.default),
        "timeout_s": task.timeout_s,
        "options": {f: getattr(task.options, f) for f in task.options.__dataclass_fields__},
    }


def profile_in_child(
    fn: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    iters: int,
    warmup: int,
    llo: bool,
    custom_call_tracing: bool,
    logdir: str,
) -> dict[str, Any]:
    """Captures a trace of ``fn`` in a child started with the profiling flags; returns what
    :func:`jaxtune._profiling.profiled.capture` returned there.

    Raises:
        NotTransportable: ``fn`` or its arguments cannot travel (the caller captures inline).
        ProfileError: the child failed; the message holds its stderr.
    """
    from .._config import settings
    from .._profiling.report import ProfileError

    message = {
        "op": "profile",
        "ref": _function_ref(fn),
        "args": encode_value(tuple(args)),
        "kwargs": encode_value(dict(kwargs)),
        "iters": iters,
        "warmup": warmup,
        "logdir": logdir,
    }
    runner = ProcessRunner(profiling={"llo": llo, "custom_call_tracing": custom_call_tracing})
    child = runner._child()
    limit = settings().timeout * (iters + max(warmup, 2) + 5)
    with child.lock:
        offset = child.log_size()
        try:
            child.send(message)
            answer = child.reader.read(timeout=limit)
        except (OSError, EOFError):
            answer = "eof"
        if answer is None or answer == "eof":
            how = "did not finish in time" if answer is None else child.describe_exit()
            runner._discard(child)
            raise ProfileError(f"the profiling child {how}; stderr: {child.stderr_tail(offset)}")
    if answer.get("t") == "error" and answer.get("type") == "NotTransportable":
        raise NotTransportable(answer["message"])
    if answer.get("t") == "error":
        raise ProfileError(answer["message"])
    info: dict[str, Any] = answer["info"]
    return info


_WARNED: set[Any] = set()


def _warn_once(key: Any, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, JaxtuneWarning, stacklevel=5)


def default_runner() -> Runner:
    """The runner ``JAXTUNE_ISOLATION`` selects: ``process`` (default) or ``inline``."""
    from .._config import settings

    return InlineRunner() if settings().isolation == "inline" else ProcessRunner()
