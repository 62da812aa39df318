"""What a Mosaic TPU custom call's ``backend_config`` says about its Pallas kernel: the
kernel's name (its kernel function, or ``pallas_call(name=...)``) and its cost estimate.

A Pallas TPU kernel lowers to a ``tpu_custom_call`` whose HLO instruction is named after
the scope around it (``flash_attention.1``, or a generated
``flash_mha_bwd_dq_block_q_major_128_...``); the kernel's own name is only in the Mosaic
module the call carries: ``backend_config`` is JSON, its ``custom_call_config.body`` the
module as base64 MLIR bytecode, whose kernel function (``func.func`` with ``sym_name``
``_flash_attention_kernel``) sits beside the index-map functions ``transform_<n>``. That
function's attribute dictionary is read from the bytecode's string and attribute
sections (MLIR's bytecode format: ``mlir/docs/BytecodeFormat.md``), never by running
anything; a body that does not read as expected gives no name, never an error.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["TARGET", "cost_estimate", "kernel_name"]

#: The custom-call target of a Mosaic TPU kernel.
TARGET = "tpu_custom_call"

_MAGIC = b"ML\xefR"
_STRINGS, _DIALECTS, _ATTRS, _ATTR_OFFSETS = 0, 1, 2, 3
#: Codes of the builtin dialect's attribute encodings (``BuiltinDialectBytecode.td``).
_DICTIONARY, _STRING = 1, 2
#: The index maps Pallas lowers beside the kernel function.
_INDEX_MAP = re.compile(r"^transform_\d+$")
#: Attributes only the kernel function carries (its grid and block specs).
_KERNEL_ATTRS = ("window_params", "iteration_bounds", "dimension_semantics")


class _MalformedError(ValueError):
    pass


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """MLIR's prefix varint at ``at``: ``(value, next offset)``. The first byte's trailing
    zeros say how many more bytes follow."""
    if at >= len(data):
        raise _MalformedError("varint past the end")
    first = data[at]
    if first == 0:
        if at + 9 > len(data):
            raise _MalformedError("varint past the end")
        return int.from_bytes(data[at + 1 : at + 9], "little"), at + 9
    size = (first & -first).bit_length()
    if at + size > len(data):
        raise _MalformedError("varint past the end")
    return int.from_bytes(data[at : at + size], "little") >> size, at + size


def _sections(body: bytes) -> dict[int, bytes]:
    if not body.startswith(_MAGIC):
        raise _MalformedError("not MLIR bytecode")
    _, at = _varint(body, len(_MAGIC))  # version
    at = body.index(b"\0", at) + 1  # producer
    out: dict[int, bytes] = {}
    while at < len(body):
        head = body[at]
        at += 1
        size, at = _varint(body, at)
        if head & 0x80:  # aligned: the alignment, then padding to it
            align, at = _varint(body, at)
            if align <= 0 or align > 1 << 16:
                raise _MalformedError("bad alignment")
            at += -at % align
        if at + size > len(body):
            raise _MalformedError("section past the end")
        out[head & 0x7F] = body[at : at + size]
        at += size
    return out


def _strings(section: bytes) -> list[str]:
    count, at = _varint(section, 0)
    sizes = []
    for _ in range(count):
        size, at = _varint(section, at)
        sizes.append(size)
    out = []
    for size in reversed(sizes):  # the lengths are written last string first
        if size < 1 or at + size > len(section):
            raise _MalformedError("string past the end")
        out.append(section[at : at + size - 1].decode("utf-8", errors="replace"))
        at += size
    return out


def _attributes(sections: Mapping[int, bytes], strings: list[str]) -> list[Any]:
    """Each attribute of the module, as far as the name needs: a builtin string (``str``),
    a builtin dictionary (``list`` of ``(name index, value index)``), else ``None``."""
    count, at = _varint(sections[_DIALECTS], 0)
    dialects = []
    for _ in range(count):
        name, at = _varint(sections[_DIALECTS], at)
        # From bytecode version 1 the low bit says whether a version follows.
        dialects.append(strings[name] if name < len(strings) else "")
    offsets = sections[_ATTR_OFFSETS]
    attrs, at = _varint(offsets, 0)
    types, at = _varint(offsets, at)
    entries: list[tuple[int, int, bool]] = []
    while len(entries) < attrs + types:
        dialect, at = _varint(offsets, at)
        n, at = _varint(offsets, at)
        for _ in range(n):
            v, at = _varint(offsets, at)
            entries.append((dialect, v >> 1, bool(v & 1)))
    data, pos, out = sections[_ATTRS], 0, []
    for dialect, size, custom in entries[:attrs]:
        raw = data[pos : pos + size]
        pos += size
        builtin = dialect < len(dialects) and dialects[dialect] == "builtin"
        out.append(_builtin(raw, strings) if custom and builtin else None)
    return out


def _builtin(raw: bytes, strings: list[str]) -> Any:
    code, at = _varint(raw, 0)
    if code == _STRING:
        index, _ = _varint(raw, at)
        return strings[index] if index < len(strings) else None
    if code == _DICTIONARY:
        n, at = _varint(raw, at)
        pairs = []
        for _ in range(n):
            name, at = _varint(raw, at)
            value, at = _varint(raw, at)
            pairs.append((name, value))
        return pairs
    return None


def _function_names(body: bytes) -> list[tuple[str, bool]]:
    """``(sym_name, is the kernel function)`` of every function the module defines."""
    sections = _sections(body)
    strings = _strings(sections[_STRINGS])
    attrs = _attributes(sections, strings)

    def text(index: int) -> str | None:
        value = attrs[index] if 0 <= index < len(attrs) else None
        return value if isinstance(value, str) else None

    found = []
    for attr in attrs:
        if not isinstance(attr, list):
            continue
        named = {text(k): text(v) for k, v in attr}
        name = named.get("sym_name")
        if name and "function_type" in named:
            found.append((name, any(k in named for k in _KERNEL_ATTRS)))
    return found


def _config(backend_config: str | bytes) -> Mapping[str, Any] | None:
    try:
        doc = json.loads(backend_config)
    except (ValueError, TypeError, RecursionError):
        return None
    config = doc.get("custom_call_config") if isinstance(doc, Mapping) else None
    return config if isinstance(config, Mapping) else None


def kernel_name(backend_config: str | bytes) -> str | None:
    """The Pallas kernel's name in a ``tpu_custom_call``'s backend config (the Mosaic
    module's kernel function: the one with a grid, else the one function that is not an
    index map ``transform_<n>``); ``None`` when the config does not say.

    >>> kernel_name('{"custom_call_config": {"body": "bm90IE1MSVI="}}') is None
    True
    """
    config = _config(backend_config)
    body = config.get("body") if config else None
    if not isinstance(body, str):
        return None
    try:
        names = _function_names(base64.b64decode(body, validate=False))
    except (_MalformedError, binascii.Error, ValueError, IndexError, KeyError):
        return None
    kernels = [n for n, is_kernel in names if is_kernel]
    if len(kernels) == 1:
        return kernels[0]
    others = [n for n, _ in names if not _INDEX_MAP.match(n)]
    return others[0] if len(others) == 1 else None


def cost_estimate(backend_config: str | bytes) -> dict[str, float] | None:
    """The kernel's own ``pl.CostEstimate`` as the call carries it (``flops``,
    ``transcendentals``, ``bytes_accessed``; numbers written as text), or ``None``."""
    config = _config(backend_config)
    estimate = config.get("cost_estimate") if config else None
    if not isinstance(estimate, Mapping):
        return None
    out = {}
    for key in ("flops", "transcendentals", "bytes_accessed"):
        try:
            value = float(estimate[key])
        except (KeyError, TypeError, ValueError):
            continue
        if value >= 0 and value != float("inf"):
            out[key] = value
    return out or None
