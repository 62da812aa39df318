"""A fault inside the child is reported as one (docs/isolation.md, "What travels"): only a
kernel, function or argument type the child cannot import sends the work back to this
process (``NotTransportable``); any other error inside the child, a ``KeyError`` of the
engine or of the user's ``inputs=`` among them, is answered as a failure with its traceback,
never as "could not import it" (which would re-run the sweep here without crash
isolation)."""

from __future__ import annotations

import os

import pytest

from jaxtune._isolation import child as _child
from jaxtune._isolation.frames import ErrorKind, Request
from jaxtune._isolation.resolve import Unresolved
from jaxtune._tuning.sweep import serve as _serve

REQUEST = Request(handler="jaxtune._tuning.sweep.serve", op="measure", ref=None, fields={})


@pytest.fixture
def server():
    read, write = os.pipe()
    yield _child.Server(write)
    os.close(read)
    os.close(write)


def test_an_internal_key_error_is_a_fault_with_its_traceback(server, monkeypatch):
    def broken(srv, request):
        return {"plan": 1}["task"]  # a bug: a KeyError inside the handler

    monkeypatch.setattr(_serve, "handle", broken)
    answer = server.answer(REQUEST)
    assert answer.kind is ErrorKind.INTERNAL
    assert "KeyError" in answer.message and "'task'" in answer.message
    assert "in broken" in answer.message  # the traceback names where
    assert "could not import" not in answer.message


def test_only_what_cannot_be_imported_goes_back_to_the_parent(server, monkeypatch):
    def unresolved(srv, request):
        raise Unresolved("cannot import mylib.kernels: No module named 'mylib'")

    monkeypatch.setattr(_serve, "handle", unresolved)
    answer = server.answer(REQUEST)
    assert answer.kind is ErrorKind.NOT_TRANSPORTABLE
    assert "No module named 'mylib'" in answer.message
