"""The frames parent and child exchange: typed at both ends, a request one record (its flow's
fields a record under ``fields``; one kept by an older jaxtune, its fields at the top level,
still reads), anything else refused by field; and the capture info a profile's child sends
back and its sidecar keeps."""

from __future__ import annotations

import inspect
import os

import jax.numpy as jnp
import pytest
from faulty_kernels import faulty

from jaxtune._core import errors as _errors
from jaxtune._core.codec import packb, unpackb
from jaxtune._core.vocabulary import (
    CaptureInfo,
    Failure,
    Measurement,
    PallasKernel,
    ProfileOptions,
)
from jaxtune._isolation import frames
from jaxtune._isolation.frames import (
    CompileFinished,
    CompileStarted,
    ConfigResult,
    Done,
    ErrorKind,
    ErrorReply,
    FrameError,
    FunctionRef,
    Module,
    NotTransportable,
    Preload,
    Ready,
    Request,
    RoundStarted,
    RoundTimed,
    RunFinished,
    RunStarted,
)
from jaxtune._isolation.framing import FrameReader, write_frame
from jaxtune._isolation.wire import decode_value
from jaxtune._profiling.capture import capture_options
from jaxtune._tuning.sweep import requests as _requests
from jaxtune._tuning.sweep.work import Rounds


def sweep_request() -> Request[_requests.SweepFields]:
    task = faulty.options.bound(
        faulty.options.bind((jnp.ones(8),), {}), [{"mode": "ok"}], {"mode": "ok"}
    ).sweep_task()
    return _requests.sweep_request(task)


def test_a_sweep_request_is_one_record_and_reads_back():
    request = sweep_request()
    wire = request.to_wire()
    # The call's fields, the version, and the flow's own record under `fields`.
    assert set(wire) == {"v", "handler", "op", "ref", "fields", "args", "kwargs", "jax_state"} | {
        "environ"
    }
    assert wire["v"] == 2 and set(wire["fields"]) == {"task_id", "plan"}
    assert wire["handler"] == _requests.HANDLER
    assert wire["ref"]["kernel"] == "tests.faulty"
    read, write = os.pipe()
    try:
        write_frame(write, wire)  # as a child receives it, or a sidecar keeps it
        received = FrameReader(read).read()
    finally:
        os.close(read)
        os.close(write)
    again = _requests.read_request(received)
    assert again.ref == request.ref and again.fields.task_id == request.fields.task_id
    assert again.fields.plan == request.fields.plan and again.jax_state == request.jax_state
    assert again.fields.work is None  # a recorded request: each operation fills it in
    assert decode_value(again.args)[0].shape == (8,)
    # As it arrives, before the sweep reads it: the fields as they travelled.
    arrived = Request.from_wire(received)
    assert arrived.fields == wire["fields"] and arrived.ref == request.ref
    # Read as a sweep request in one go, as the child reads it in two.
    assert Request.from_wire(received, _requests.SweepFields).fields == again.fields


def test_a_request_kept_before_its_fields_had_their_own_field_reads_as_it_did():
    """Version 1 (no ``v``), as recordings and sidecars kept it: the flow's fields beside
    the call's at the top level."""
    wire = sweep_request().recorded().to_wire()
    old = {k: v for k, v in wire.items() if k not in ("v", "fields")} | wire["fields"]
    assert "v" not in old and old["task_id"] == wire["fields"]["task_id"]
    read = _requests.read_request(old)
    assert read.fields == _requests.read_request(wire).fields
    assert read.fields.plan is not None and read.fields.plan.kernel == "tests.faulty"
    assert (read.handler, read.op, read.ref) == (wire["handler"], "measure", sweep_request().ref)
    assert read.recorded().to_wire() == wire  # written again in this version's form
    with pytest.raises(FrameError, match=r"request.fields.plan.timeout_s: expected float"):
        _requests.read_request({**old, "plan": {**old["plan"], "timeout_s": "slow"}})


def test_a_request_of_a_newer_version_is_refused_as_such():
    wire = {**sweep_request().to_wire(), "v": 3}
    with pytest.raises(FrameError, match="version 3, written by a newer jaxtune"):
        _requests.read_request(wire)


def test_operations_carry_their_fields_and_a_lean_request_drops_the_call():
    request = sweep_request()
    measure = _requests.Measure(todo=[{"mode": "ok"}], best_us=3.0, rounds=Rounds.AT_ONCE).of(
        request
    )
    assert measure.op == "measure"
    assert measure.to_wire()["fields"]["work"]["op"] == "measure"  # its tag
    assert _requests.read_request(measure.to_wire()).fields.work == _requests.Measure(
        todo=[{"mode": "ok"}], best_us=3.0, rounds=Rounds.AT_ONCE
    )
    retime = _requests.Retime(todo=[{"mode": "ok"}], serial=True).of(request)
    work = retime.to_wire()["fields"]["work"]
    assert (retime.op, work["op"], work["serial"]) == ("retime", "retime", True)
    assert _requests.read_request(retime.to_wire()).fields == retime.fields
    lean = measure.lean(measure.fields.lean())
    assert not lean.has_call and measure.has_call
    assert {"args", "kwargs", "ref"}.isdisjoint(lean.to_wire())
    assert "plan" not in lean.to_wire()["fields"]
    assert _requests.read_request(lean.to_wire()).fields.task_id == request.fields.task_id


def test_the_value_sets_of_a_mix_travel_as_records_with_the_plan_only():
    """Further value sets of a call (recorded steps under ``jaxtune tune --``) travel as
    :class:`MixedSet` records beside the plan, and a lean request leaves both out."""
    from jaxtune._isolation.wire import encode_value
    from jaxtune._tuning.recorded import ValueSet

    request = sweep_request()
    sets = [
        ValueSet(kernel="tests.faulty", key="k", args=encode_value((jnp.full(8, v),)), kwargs={})
        for v in (1.0, 2.0, 3.0)
    ]
    mixed = _requests.with_recorded_values(request, sets)
    assert mixed.args == sets[0].args
    assert mixed.fields.mix == tuple(_requests.MixedSet(args=s.args, kwargs={}) for s in sets[1:])
    wire = mixed.to_wire()
    assert [set(m) for m in wire["fields"]["mix"]] == [{"args", "kwargs"}] * 2
    out, into = os.pipe()
    try:
        write_frame(into, wire)  # as the child receives it
        received = FrameReader(out).read()
    finally:
        os.close(out)
        os.close(into)
    read = _requests.read_request(received)
    assert isinstance(read.fields.mix[0], _requests.MixedSet)
    assert [float(decode_value(m.args)[0][0]) for m in read.fields.mix] == [2.0, 3.0]
    assert "mix" not in mixed.lean(mixed.fields.lean()).to_wire()["fields"]


def _with_fields(wire: dict, **change) -> dict:
    return {**wire, "fields": {**wire["fields"], **change}}


def _measuring() -> dict:
    return _requests.Measure(todo=[{"mode": "ok"}]).of(sweep_request()).to_wire()


@pytest.mark.parametrize(
    "todo", [None, 5, [1, 2], "mode=ok"], ids=["missing", "int", "not maps", "str"]
)
def test_a_sweep_request_with_bad_configs_is_refused(todo):
    wire = _measuring()
    wire = _with_fields(wire, work={**wire["fields"]["work"], "todo": todo})
    with pytest.raises(FrameError, match=r"request.fields.work.todo"):
        _requests.read_request(wire)


@pytest.mark.parametrize(
    "change, where",
    [
        ({"task_id": 3}, "request.fields.task_id: expected str"),
        ({"plan": [1]}, "request.fields.plan: expected a SweepPlan"),
        ({"plan": {"kernel": "k"}}, r"request.fields.plan.key: missing"),
        ({"mix": 5}, "request.fields.mix: expected a list"),
        ({"mix": [{"args": []}]}, r"request.fields.mix\[0\].kwargs: missing"),
        ({"work": {"op": "compile", "todo": []}}, r"request.fields.work.op: expected one of"),
        ({"work": {"todo": []}}, r"request.fields.work.op: missing"),
    ],
    ids=[
        "task id",
        "plan not a map",
        "plan without its fields",
        "mix not a list",
        "a value set without kwargs",
        "op",
        "no op",
    ],
)
def test_a_damaged_sweep_request_is_refused_by_field(change, where):
    with pytest.raises(FrameError, match=where):
        _requests.read_request(_with_fields(_measuring(), **change))


@pytest.mark.parametrize(
    "change, why",
    [
        ({"op": "compile"}, "asks to measure or retime, not 'compile'"),
        ({"fields": 5}, "request.fields: expected a SweepFields"),
        ({"jax_state": [1]}, "request.jax_state: expected a JaxState"),
        ({"ref": {"qualname": "f"}}, "request.ref.module: missing"),
    ],
    ids=["op", "fields not a map", "jax state", "ref"],
)
def test_a_damaged_request_envelope_is_refused_by_field(change, why):
    with pytest.raises(FrameError, match=why):
        _requests.read_request({**_measuring(), **change})


def test_a_capture_request_carries_its_options_as_its_fields_and_reads_back():
    ref = FunctionRef(module="m", qualname="f")
    fields = ProfileOptions(iters=3, warmup=1, llo=False, logdir="/tmp/x")
    request = Request(handler="jaxtune._profiling.serve", op="profile", ref=ref, fields=fields)
    wire = request.to_wire()
    assert wire["fields"] == {
        "iters": 3,
        "warmup": 1,
        "llo": False,
        "custom_call_tracing": False,
        "logdir": "/tmp/x",
    }
    received = Request.from_wire(wire)
    assert received.with_fields("profile", capture_options(received)) == request
    with pytest.raises(FrameError, match=r"iters, warmup and logdir \(fields.iters: expected"):
        capture_options(Request.from_wire({**wire, "fields": {**wire["fields"], "iters": "3"}}))


@pytest.mark.parametrize(
    "raw",
    [
        None,
        3,
        [],
        {},
        {"t": "nope"},
        {"t": 1},
        {"t": "event", "kind": "ran", "cid": "a"},
        {"t": "error", "kind": "KeyError", "message": "x"},
        {"t": "error", "message": "no kind"},
        {"t": "done", "body": [1]},
    ],
)
def test_a_map_that_is_no_reply_is_refused(raw):
    with pytest.raises(FrameError):
        frames.reply(raw)


MEASUREMENT = Measurement(
    config={"mode": "ok"},
    median_us=2.0,
    min_us=1.5,
    spread=0.1,
    samples=3,
    compile_s=0.2,
    rounds_us=(2.0, 2.1),
    dropped=True,
    behind=True,
)
EVENTS = [
    CompileStarted(cid="mode='ok'", thread=140_000_000_001),
    CompileFinished(cid="mode='ok'", seconds=0.25),
    CompileFinished(cid="mode='bad'"),
    RunStarted(cid="mode='ok'", thread=7),
    RoundStarted(cids=("mode='ok'", "mode='fast'")),
    RunFinished(cid="mode='ok'"),
    RoundTimed(cid="mode='ok'", done=3, racing=2),
    ConfigResult(cid="mode='ok'", result=MEASUREMENT),
    ConfigResult(
        cid="mode='bad'", result=Failure(config={"mode": "bad"}, stage="compile", reason="no")
    ),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_each_event_round_trips_through_the_wire_under_its_tag(event):
    wire = event.to_wire()
    assert wire["t"] == type(event).WIRE_TAG[1]
    assert frames.reply(unpackb(packb(wire))) == event


def test_every_event_kind_has_its_own_tag():
    kinds = {type(e) for e in EVENTS}
    assert kinds == set(frames.Event.__args__)
    assert len({k.WIRE_TAG for k in kinds}) == len(kinds)


@pytest.mark.parametrize(
    "raw, why",
    [
        ({"t": "compile_begin", "cid": "a", "thread": 1}, "no frame of kind 'compile_begin'"),
        ({"t": "compile_start", "cid": "a", "thread": "1"}, r"thread: expected int, got str"),
        ({"t": "run_start", "cid": "a", "thread": True}, r"thread: expected int, got bool"),
        ({"t": "run_start", "cid": "a"}, r"RunStarted.thread: missing"),
        ({"t": "compiled", "cid": "a", "seconds": "fast"}, r"seconds: expected float"),
        ({"t": "round_start", "cids": "ab"}, r"cids: expected a list"),
        ({"t": "round_start", "cids": []}, "at least one config"),
        ({"t": "round_start", "cids": ["a", 2]}, r"cids\[1\]: expected str"),
        ({"t": "result", "cid": "a", "result": [1]}, "expected a Measurement"),
        (
            {"t": "result", "cid": "a", "result": {"ok": "yes"}},
            r"result.ok: expected one of \[True, False\], got str 'yes'",
        ),
        ({"t": "ran", "cid": 3}, r"RunFinished.cid: expected str, got int 3"),
    ],
)
def test_an_event_of_an_unknown_tag_or_with_the_wrong_data_is_refused(raw, why):
    with pytest.raises(FrameError, match=why):
        frames.reply(raw)


def test_replies_round_trip_through_their_wire_form():
    done = Done(body={"results": {}}, notes=("a note",), unapplied={"x64": "why"})
    error = ErrorReply(kind=ErrorKind.SWEEP, message="boom", notes=("n",))
    ready = Ready(
        pid=7, platform="cpu", device_kind="cpu", device_count=1, versions={"jax": "0"}, env={}
    )
    for frame in (*EVENTS, done, error, ready):
        assert frames.reply(frame.to_wire()) == frame


def _jaxtune_errors() -> list[type[Exception]]:
    return [
        c
        for _, c in inspect.getmembers(_errors, inspect.isclass)
        if issubclass(c, _errors.JaxtuneError)
    ]


@pytest.mark.parametrize("error_class", _jaxtune_errors(), ids=lambda c: c.__name__)
def test_every_jaxtune_error_travels_as_its_own_kind_and_comes_back_as_its_class(error_class):
    reply = frames.reply(ErrorReply.of(error_class("what went wrong")).to_wire())
    assert isinstance(reply, ErrorReply) and reply.kind.exception_class() is error_class
    raised = reply.exception(default=_errors.ProfileError)
    assert type(raised) is error_class and str(raised) == "what went wrong"


def test_an_error_of_no_listed_class_is_an_internal_fault_raised_as_the_flows_error():
    class MyError(_errors.SweepError):
        pass

    assert ErrorReply.of(MyError("x")).kind is ErrorKind.SWEEP  # its nearest listed class
    fault = ErrorReply.of(KeyError("task"))
    assert fault.kind is ErrorKind.INTERNAL and fault.kind.exception_class() is None
    assert type(fault.exception(default=_errors.ProfileError)) is _errors.ProfileError
    moved = ErrorReply.of(NotTransportable("a closure"))
    assert type(moved.exception(default=_errors.SweepError)) is NotTransportable
    assert ErrorKind.UNKNOWN_TASK.exception_class() is None


def test_a_ready_frame_without_its_fields_is_refused():
    with pytest.raises(FrameError, match=r"Ready\.platform: missing"):
        frames.reply({"t": "ready", "pid": 3})


def test_requests_the_child_reads():
    preload = Preload(
        modules=(Module(ref=FunctionRef(module="m", qualname="f"), environ={"A": "1"}),),
        handlers=("jaxtune._tuning.sweep.serve",),
    )
    assert frames.request(preload.to_wire()) == preload
    assert isinstance(frames.request(frames.Exit().to_wire()), frames.Exit)
    bad_requests = (
        {},
        {"op": "measure"},
        {"handler": 3, "op": "x"},
        "exit",
        {"t": "quit"},
        {"t": "preload", "modules": [{"environ": {}}]},
        {"handler": "jaxtune.x", "op": "x", "jax_state": [1]},
    )
    for bad in bad_requests:
        with pytest.raises(FrameError):
            frames.request(bad)
    with pytest.raises(FrameError):
        frames.request({"handler": "jaxtune.x", "op": "x", "ref": {"qualname": "f"}})


def test_capture_info_reads_back_and_refuses_fields_of_the_wrong_kind():
    info = CaptureInfo(
        platform="cpu",
        kernels=(PallasKernel(name="k", scope=("jit(f)",)),),
        hlo={"add.1": ("jit(f)/add", None)},
        timings={"compile_s": 0.5},
        env={"XLA_FLAGS": None},
    )
    assert CaptureInfo.from_dict(unpackb(packb(info.to_dict()))).kernels == info.kernels
    assert not CaptureInfo() and info
    for bad in (
        {"kernels": 5},
        {"kernels": [1]},
        {"calls": "x"},
        {"platform": 3},
        {"hints": [1]},
        {"timings": {"run_s": "slow"}},
        {"env": {"XLA_FLAGS": 1}},
        [],
    ):
        with pytest.raises(ValueError, match="capture info"):
            CaptureInfo.from_dict(bad)
