"""Compiled HLO text -> what attribution needs: each instruction's op name (name stack) and
custom-call target, and the op names fused into each fusion."""

from __future__ import annotations

import re

__all__ = ["hlo_fusions", "hlo_ops"]

_HLO_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_OP_NAME = re.compile(r'op_name="(?P<op>(?:[^"\\]|\\.)*)"')
_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]*)"')


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"calls=%?(?P<callee>[\w.\-]+)")


def hlo_fusions(hlo_text: str) -> dict[str, list[str]]:
    """Fusion instruction -> the distinct op names of the instructions fused into it, from
    compiled HLO text (a fusion's own metadata names only one of them)."""
    names: dict[str, list[str]] = {}
    calls: dict[str, str] = {}
    current = ""
    for line in hlo_text.splitlines():
        head = _COMPUTATION.match(line)
        if head and "=" not in line.split("{")[0]:
            current = head.group("name")
            continue
        m = _HLO_LINE.match(line)
        if not m:
            continue
        op = _OP_NAME.search(m.group("rest"))
        if op and op.group("op") not in names.setdefault(current, []):
            names[current].append(op.group("op"))
        callee = _CALLS.search(m.group("rest"))
        if callee and " fusion(" in f" {m.group('rest')}":
            calls[m.group("name")] = callee.group("callee")
    return {fusion: names.get(callee, []) for fusion, callee in calls.items()}


def hlo_ops(hlo_text: str) -> dict[str, tuple[str, str | None]]:
    """Instruction name -> ``(op_name, custom-call target)`` from compiled HLO text."""
    out: dict[str, tuple[str, str | None]] = {}
    for line in hlo_text.splitlines():
        m = _HLO_LINE.match(line)
        if not m:
            continue
        rest = m.group("rest")
        op = _OP_NAME.search(rest)
        target = _TARGET.search(rest)
        out[m.group("name")] = (
            op.group("op") if op else "",
            target.group("target") if target else None,
        )
    return out
