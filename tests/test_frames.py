"""The frames parent and child exchange: typed at both ends, the request's wire layout kept
(recorded requests in profile sidecars must read back), anything else refused; and the
capture info a profile's child sends back and its sidecar keeps."""

from __future__ import annotations

import os

import jax.numpy as jnp
import pytest
from faulty_kernels import faulty

from jaxtune._core.codec import packb, unpackb
from jaxtune._core.vocabulary import CaptureInfo
from jaxtune._isolation import frames
from jaxtune._isolation.frames import (
    Done,
    ErrorReply,
    Event,
    FrameError,
    FunctionRef,
    Module,
    Preload,
    Ready,
    Request,
)
from jaxtune._isolation.wire import FrameReader, decode_value, write_frame
from jaxtune._tuning.sweep import requests as _requests


def sweep_request() -> Request:
    task = faulty.sweep_task(faulty.bind((jnp.ones(8),), {}), [{"mode": "ok"}], {"mode": "ok"})
    return _requests.sweep_request(task)


def test_a_sweep_request_keeps_its_wire_layout_and_reads_back():
    request = sweep_request()
    wire = request.to_wire()
    # The layout recorded requests have in profile sidecars: the fields at the top level.
    assert {"handler", "op", "ref", "args", "kwargs", "jax_state", "environ"} <= set(wire)
    assert {"task_id", "plan"} <= set(wire)
    assert wire["handler"] == _requests.HANDLER
    assert wire["ref"]["kernel"] == "tests.faulty"
    read, write = os.pipe()
    try:
        write_frame(write, wire)  # as a child receives it, or a sidecar keeps it
        again = Request.from_wire(FrameReader(read).read())
    finally:
        os.close(read)
        os.close(write)
    assert again.ref == request.ref and _requests.task_id(again) == _requests.task_id(request)
    assert again.fields["plan"] == wire["plan"] and again.jax_state == wire["jax_state"]
    assert decode_value(again.args)[0].shape == (8,)


def test_operations_carry_their_fields_and_a_lean_request_drops_the_call():
    request = sweep_request()
    measure = _requests.Measure(todo=[{"mode": "ok"}], best_us=3.0, rounds=True).of(request)
    assert measure.op == "measure"
    assert _requests.Measure.from_request(measure) == _requests.Measure(
        todo=[{"mode": "ok"}], best_us=3.0, rounds=True
    )
    retime = _requests.Retime(todo=[{"mode": "ok"}], serial=True).of(request)
    assert (retime.op, retime.fields["serial"]) == ("retime", True)
    lean = measure.lean("plan")
    assert not lean.has_call and measure.has_call
    assert {"args", "kwargs", "ref", "plan"}.isdisjoint(lean.to_wire())
    assert _requests.task_id(lean) == _requests.task_id(request)


@pytest.mark.parametrize(
    "todo", [None, 5, [1, 2], "mode=ok"], ids=["missing", "int", "not maps", "str"]
)
def test_a_sweep_request_with_bad_configs_is_refused(todo):
    request = sweep_request().with_fields("measure", todo=todo)
    with pytest.raises(FrameError):
        _requests.Measure.from_request(request)


@pytest.mark.parametrize(
    "raw",
    [None, 3, [], {}, {"t": "nope"}, {"t": "event"}, {"t": "event", "kind": 1, "cid": "a"}],
)
def test_a_map_that_is_no_reply_is_refused(raw):
    with pytest.raises(FrameError):
        frames.reply(raw)


def test_replies_round_trip_through_their_wire_form():
    event = Event(kind="result", cid="mode=ok", data={"x": 1})
    done = Done(body={"results": {}}, notes=("a note",), unapplied={"x64": "why"})
    error = ErrorReply(type="SweepError", message="boom", notes=("n",))
    ready = Ready(
        pid=7, platform="cpu", device_kind="cpu", device_count=1, versions={"jax": "0"}, env={}
    )
    for frame in (event, done, error, ready):
        assert frames.reply(frame.to_wire()) == frame


def test_a_ready_frame_without_its_fields_is_refused():
    with pytest.raises(FrameError, match="ready frame"):
        frames.reply({"t": "ready", "pid": 3})


def test_requests_the_child_reads():
    preload = Preload(
        modules=(Module(ref=FunctionRef(module="m", qualname="f"), environ={"A": "1"}),),
        handlers=("jaxtune._tuning.sweep.serve",),
    )
    assert frames.request(preload.to_wire()) == preload
    assert isinstance(frames.request({"op": "exit"}), frames.Exit)
    for bad in ({}, {"op": "measure"}, {"handler": 3, "op": "x"}, "exit"):
        with pytest.raises(FrameError):
            frames.request(bad)
    with pytest.raises(FrameError):
        frames.request({"handler": "jaxtune.x", "op": "x", "ref": {"qualname": "f"}})


def test_capture_info_reads_back_and_refuses_fields_of_the_wrong_kind():
    info = CaptureInfo(
        platform="cpu",
        kernels=({"name": "k", "scope": ["jit(f)"]},),
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
