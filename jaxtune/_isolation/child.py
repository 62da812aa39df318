"""The child process: ``python -m jaxtune._isolation.child --cmd-fd N --res-fd M``.

Started by :mod:`jaxtune._isolation.runner` with its environment (flags, ``JAX_PLATFORMS``, device
visibility) set before JAX is imported. It answers a ``ready`` frame with what it actually
sees, then serves ``measure`` / ``retime`` requests for one kernel at a time, streaming an
event per step so the parent knows which config was in flight if this process dies.
stdout and stderr go to a log file; frames travel only over the two pipes.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import importlib.util
import os
import runpy
import sys
import threading
import time
import traceback
from typing import Any

__all__ = ["main", "resolve_kernel"]

_MAIN_ALIAS = "__jaxtune_main__"


def _watch_parent(parent_pid: int) -> None:
    """Exits this process soon after the parent dies, even in the middle of a compile."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch, name="jaxtune-parent-watch", daemon=True).start()


def _limit_memory() -> None:
    limit = os.environ.get("JAXTUNE_CHILD_MEMORY_LIMIT")
    if limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))


_SCRIPTS: dict[Any, dict[str, Any]] = {}


def _namespace(ref: dict[str, Any]) -> dict[str, Any]:
    """The globals of the module a reference names.

    Raises:
        LookupError: it cannot be imported here, whatever the reason.
    """
    try:
        return _import(ref)
    except Exception as e:
        raise LookupError(f"cannot import {ref['module']}: {type(e).__name__}: {e}") from e


def _import(ref: dict[str, Any]) -> dict[str, Any]:
    if ref["module"] == "__main__":
        path = ref["path"]
        if path not in _SCRIPTS:
            _SCRIPTS[path] = runpy.run_path(path, run_name=_MAIN_ALIAS)
        return _SCRIPTS[path]
    try:
        return vars(importlib.import_module(ref["module"]))
    except ImportError:
        if not ref.get("path"):
            raise
    key = ("file", ref["path"])
    if key not in _SCRIPTS:
        spec = importlib.util.spec_from_file_location(ref["module"], ref["path"])
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {ref['module']} from {ref['path']}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[ref["module"]] = module
        spec.loader.exec_module(module)
        _SCRIPTS[key] = vars(module)
    return _SCRIPTS[key]


def _walk_qualname(namespace: dict[str, Any], qualname: str) -> Any:
    obj: Any = namespace
    for part in qualname.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def resolve_callable(ref: dict[str, Any]) -> Any:
    """The function a reference names (unwrapping ``@jaxtune.profiled``)."""
    obj = _walk_qualname(_namespace(ref), ref["qualname"])
    if obj is None:
        raise LookupError(f"no function at {ref['module']}:{ref['qualname']}")
    return getattr(obj, "__wrapped_profiled__", obj)


def resolve_kernel(ref: dict[str, Any]) -> Any:
    """The ``Autotuned`` object a kernel reference names.

    ``ref`` holds ``module``, ``qualname``, ``kernel`` (its id) and, for a kernel defined in
    a script run as ``__main__``, ``path``: that script is re-run under another module name,
    so its ``if __name__ == "__main__":`` block does not run.
    """
    from .._tuning.autotuned import Autotuned, registry

    namespace = _namespace(ref)
    obj = _walk_qualname(namespace, ref["qualname"])
    if isinstance(obj, Autotuned):
        return obj
    for value in namespace.values():
        if isinstance(value, Autotuned) and value.kernel_id == ref["kernel"]:
            return value
    found = registry().get(ref["kernel"])
    if found is not None:
        return found
    raise LookupError(
        f"no @autotuned kernel {ref['kernel']!r} at {ref['module']}:{ref['qualname']}"
    )


def _build_task(msg: dict[str, Any]) -> Any:
    from .._tuning.sweep import SweepTask
    from .._tuning.timing import TimingOptions
    from .wire import decode_value

    kernel = resolve_kernel(msg["ref"])
    args = decode_value(msg["args"])
    kwargs = decode_value(msg["kwargs"])
    sig = kernel._bind(tuple(args), dict(kwargs))
    if sig.key != msg["key"]:
        raise LookupError(
            f"the child computed key {sig.key!r} for {msg['ref']['kernel']}, the parent "
            f"{msg['key']!r}; the kernel's module differs between the two processes"
        )
    return SweepTask(
        kernel=msg["ref"]["kernel"],
        fn=kernel.__wrapped__,
        signature=sig,
        configs=tuple(msg["configs"]),
        default=msg["default"],
        check=kernel.check,
        inputs=kernel.inputs,
        timeout_s=msg["timeout_s"],
        options=TimingOptions(**msg["options"]),
        verbose=0,
    )


def _serve(cmd_fd: int, res_fd: int) -> int:
    from .._errors import JaxtuneError
    from .._tuning.result import Measurement
    from .._tuning.sweep import Sweeper
    from .wire import FrameReader, write_frame

    reader = FrameReader(cmd_fd)
    current: tuple[str, Sweeper] | None = None

    def emit(kind: str, cid: str, data: Any) -> None:
        if isinstance(data, Measurement) or hasattr(data, "to_dict"):
            data = data.to_dict()
        write_frame(res_fd, {"t": "event", "kind": kind, "cid": cid, "data": data})

    while True:
        try:
            msg = reader.read()
        except EOFError:
            return 0
        op = msg.get("op")
        if op == "exit":
            return 0
        try:
            if op == "profile":
                from .._profiling.profiled import capture
                from .wire import decode_value

                info = capture(
                    resolve_callable(msg["ref"]),
                    tuple(decode_value(msg["args"])),
                    dict(decode_value(msg["kwargs"])),
                    iters=msg["iters"],
                    warmup=msg["warmup"],
                    logdir=msg["logdir"],
                )
                write_frame(res_fd, {"t": "done", "info": info})
                continue
            if current is None or current[0] != msg["task_id"]:
                current = (msg["task_id"], Sweeper(_build_task(msg), on_event=emit))
            sweeper = current[1]
            if op == "measure":
                results = sweeper.measure(
                    msg["todo"],
                    reference=msg["reference"],
                    best_us=msg["best_us"],
                    serial_compile=msg["serial"],
                )
            elif op == "retime":
                results = dict(sweeper.retime(msg["todo"]))
            else:
                raise LookupError(f"unknown request {op!r}")
            write_frame(
                res_fd, {"t": "done", "results": {k: r.to_dict() for k, r in results.items()}}
            )
        except JaxtuneError as e:
            write_frame(res_fd, {"t": "error", "type": type(e).__name__, "message": str(e)})
        except (ImportError, LookupError) as e:
            # The parent tunes or profiles in its own process instead.
            write_frame(
                res_fd,
                {
                    "t": "error",
                    "type": "NotTransportable",
                    "message": f"the child could not import it ({e})",
                },
            )
        except Exception as e:
            write_frame(
                res_fd,
                {
                    "t": "error",
                    "type": "SweepError",
                    "message": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}",
                },
            )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    parser = argparse.ArgumentParser(prog="python -m jaxtune._isolation.child")
    parser.add_argument("--cmd-fd", type=int, required=True)
    parser.add_argument("--res-fd", type=int, required=True)
    args = parser.parse_args(argv)
    faulthandler.enable()  # a crashing config leaves its Python stack in the log
    parent = os.environ.get("JAXTUNE_PARENT_PID")
    if parent:
        _watch_parent(int(parent))
    _limit_memory()

    import jax

    from .._versions import toolchain
    from .wire import write_frame

    try:
        devices = jax.devices()
        ready: dict[str, Any] = {
            "t": "ready",
            "pid": os.getpid(),
            "platform": devices[0].platform,
            "device_kind": devices[0].device_kind,
            "device_count": len(devices),
            "versions": toolchain(),
            "env": {
                k: os.environ.get(k)
                for k in (
                    "XLA_FLAGS",
                    "LIBTPU_INIT_ARGS",
                    "JAX_PLATFORMS",
                    "CUDA_VISIBLE_DEVICES",
                    "TPU_VISIBLE_CHIPS",
                    "XLA_PYTHON_CLIENT_PREALLOCATE",
                )
            },
        }
    except Exception as e:
        write_frame(
            args.res_fd,
            {
                "t": "error",
                "type": "SweepError",
                "message": f"the child's backend did not start: {e}",
            },
        )
        return 3
    write_frame(args.res_fd, ready)
    return _serve(args.cmd_fd, args.res_fd)


if __name__ == "__main__":
    sys.exit(main())
