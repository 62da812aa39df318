"""The package's shape: no module reaches into another's private names, no import cycles,
and the top level holds only the shared modules and the flow subpackages."""

from __future__ import annotations

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parent.parent / "jaxtune"
TOP_LEVEL = {
    "__init__.py",
    "__main__.py",
    "flags.py",
    "py.typed",
    "_codec.py",
    "_config.py",
    "_setting_values.py",
    "_errors.py",
    "_flags.py",
    "_markers.py",
    "_versions.py",
    "_distributed.py",
}
SUBPACKAGES = {"_tuning", "_profiling", "_isolation", "_cli", "_distributed", "examples"}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _resolve(current: str, is_package: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _imports(name: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import in module `name`."""
    is_package = MODULES[name].name == "__init__.py"
    found = []
    typing_only = {
        id(inner)
        for node in ast.walk(TREES[name])
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    for node in ast.walk(TREES[name]):
        if id(node) in typing_only:
            continue  # imports for annotations only are no run-time dependency
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, is_package, node.level, node.module)
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:
                    found.append((f"{target}.{alias.name}", None, node.lineno))
                else:
                    found.append((target, alias.name, node.lineno))
    return [f for f in found if f[0] == "jaxtune" or f[0].startswith("jaxtune.")]


def test_top_level_holds_only_shared_modules_and_flow_packages():
    entries = {p.name for p in PKG.iterdir() if p.name != "__pycache__"}
    assert entries - TOP_LEVEL - SUBPACKAGES == set()
    assert SUBPACKAGES - {"examples"} <= entries


def test_no_module_imports_another_modules_private_name():
    offences = []
    for name in MODULES:
        for module, imported, line in _imports(name):
            if imported is not None and imported.startswith("_") and imported != "__version__":
                offences.append(f"{name}:{line} imports {module}.{imported}")
    assert offences == []


# Private names of the standard library and of JAX that are documented or stable enough.
ALLOWED_FOREIGN_PRIVATE = {"_exit", "_replace", "_asdict", "_fields", "_src"}


def _defined_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name)
    slots = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("_")
    ]
    return names | set(slots)


def test_no_module_touches_another_modules_private_attribute():
    """``other._name`` is a reach-in unless this module defines ``_name`` itself (its own
    class's attributes, reached through another instance of that class)."""
    offences = []
    for name, tree in TREES.items():
        own = _defined_names(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in own
                and node.attr not in ALLOWED_FOREIGN_PRIVATE
                and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
            ):
                offences.append(f"{name}:{node.lineno} uses .{node.attr}")
    assert offences == []


def test_no_import_cycles():
    graph = {
        name: {m for m, _, _ in _imports(name) if m in MODULES and m != name} for name in MODULES
    }
    # A package's __init__ re-exporting its children is not a cycle of behaviour.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []
