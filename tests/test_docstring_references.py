"""Names that prose points at exist: every module, function or class a docstring in
``jaxtune/`` names (``:mod:`` / ``:func:`` / ``:class:`` roles, ``jaxtune.x.y`` dotted
names, ``_x/y.py`` paths, and the submodules a package's ``__init__`` lists), and every
file ``docs/development.md`` names, resolve to something in the tree today.

Read statically (``ast``), so a renamed module or function fails here rather than leaving a
newcomer reading about code that is gone."""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import re
from collections.abc import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "jaxtune"
DEVELOPMENT = ROOT / "docs" / "development.md"

#: Sphinx roles naming Python objects: ``:func:`x```, ``:mod:`.y```, ...
ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|const|exc|obj):`~?([^`<>]+?)(?:\(\))?`")
#: ``jaxtune.x.y`` anywhere in a docstring (``python -m jaxtune._isolation.child`` too).
DOTTED = re.compile(r"(?<![\w./'\"-])(jaxtune(?:\.[A-Za-z_]\w*)+)")
#: A path below the package: ``_tuning/sweep/drive.py``, ``jaxtune/_core/xspace``.
PATH = re.compile(r"(?<![\w./-])((?:jaxtune/)?_[a-z]\w*(?:/\w+)*(?:\.py)?)(?:\.(\w+))?(?![\w/])")
#: A double-backtick literal holding a bare identifier (a package ``__init__`` lists its
#: submodules so: ``store``, ``agree``).
LITERAL = re.compile(r"``([a-z_][a-z0-9_]*)``")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _package_of(module: str) -> str:
    return module if _is_package(module) else module.rpartition(".")[0]


def _absolute(module: str, level: int, name: str | None) -> str:
    base = _package_of(module).split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _members(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body binds (imports as what they import)."""
    found: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                found[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            found.update(_members(node.body))
            for handler in getattr(node, "handlers", ()):
                found.update(_members(handler.body))
            found.update(_members(getattr(node, "orelse", [])))
    return found


MEMBERS = {name: _members(tree.body) for name, tree in TREES.items()}


def _attribute(module: str, parts: list[str]) -> bool:
    """Whether ``parts`` name something reachable from module ``module``'s top level."""
    if not parts:
        return True
    child = f"{module}.{parts[0]}"
    if child in MODULES:
        return _attribute(child, parts[1:])
    node = MEMBERS[module].get(parts[0])
    if node is None:
        return False
    rest = parts[1:]
    if isinstance(node, ast.ImportFrom):
        source = _absolute(module, node.level, node.module) if node.level else node.module
        if source not in MODULES:  # outside jaxtune: trusted as far as the import
            return True
        alias = next(a for a in node.names if (a.asname or a.name) == parts[0])
        return _attribute(source, [alias.name, *rest])
    if isinstance(node, ast.Import):
        return True
    if isinstance(node, ast.ClassDef):
        if not rest:
            return True
        return rest[0] in _class_body(node) and len(rest) == 1
    return not rest  # a function or value: nothing below it is checked


def _class_body(node: ast.ClassDef) -> dict[str, ast.AST]:
    members = _members(node.body)
    # Instance attributes set in methods (``self.x = ...``) count as members too.
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and ast.unparse(inner.value) == "self":
            members.setdefault(inner.attr, inner)
    return members


def resolves(reference: str, module: str) -> bool:
    """Whether ``reference`` (absolute, ``.relative`` or bare) names something that exists,
    read from the docstring of module ``module`` (Sphinx's rules: the current module, then
    its package and the packages above it)."""
    reference = reference.strip().lstrip("~").removesuffix("()")
    if reference.startswith("jaxtune"):
        parts = reference.split(".")
        return parts[0] == "jaxtune" and _attribute("jaxtune", parts[1:])
    parts = reference.lstrip(".").split(".")
    if not reference.startswith(".") and parts[0] not in MEMBERS[module]:
        if _external(parts[0]):
            return True  # ``jax._src...``: not jaxtune's to check
        if len(parts) == 1 and any(parts[0] in m for m in _class_members(module)):
            return True  # a method or attribute named from inside its class
    scopes = [module, *_parents(_package_of(module))]
    return any(_attribute(scope, parts) for scope in scopes)


def _external(name: str) -> bool:
    return name != "jaxtune" and importlib.util.find_spec(name) is not None


def _class_members(module: str) -> Iterator[set[str]]:
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.ClassDef):
            yield set(_class_body(node))


def _parents(package: str) -> Iterator[str]:
    parts = package.split(".")
    while parts:
        yield ".".join(parts)
        parts.pop()


def path_exists(text: str) -> bool:
    """Whether ``text`` (``_tuning/sweep/drive.py``, ``jaxtune/_core/xspace``,
    ``_tuning/sweep/drive.run_sweep``) names a file or folder of the package (and, after a
    module's path, one of its names)."""
    match = PATH.fullmatch(text)
    if match is None:
        return False
    path, attribute = match.group(1), match.group(2)
    relative = path.removeprefix("jaxtune/")
    target = PKG / relative
    if attribute and not relative.endswith(".py"):
        module = "jaxtune." + relative.replace("/", ".")
        return module in MODULES and _attribute(module, [attribute])
    return target.exists() or target.with_suffix(".py").exists()


def _docstrings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield (node.body[0].lineno if node.body else 0), text


def _references(module: str) -> Iterator[tuple[int, str, bool]]:
    """(line, reference, whether it resolves) for every reference in ``module``'s
    docstrings."""
    package_doc = ast.get_docstring(TREES[module], clean=False) if _is_package(module) else None
    for line, text in _docstrings(TREES[module]):
        for found in ROLE.findall(text):
            yield line, found, resolves(found, module)
        for found in DOTTED.findall(text):
            yield line, found, resolves(found, module)
        for literal in re.findall(r"``([^`]+)``", text):
            for match in PATH.finditer(literal):
                if "/" in match.group(0):
                    yield line, match.group(0), path_exists(match.group(0))
        if text == package_doc:
            for found in LITERAL.findall(text):
                yield line, found, found == "jaxtune" or _attribute(module, [found])


def test_the_checker_tells_a_stale_name_from_a_live_one() -> None:
    assert resolves(".lookup", "jaxtune._tuning")
    assert resolves("jaxtune._tuning.sweep.drive.run_sweep", "jaxtune._core")
    assert not resolves(".runner", "jaxtune._isolation")
    assert not resolves("jaxtune._tuning.sweep.drive.no_such_function", "jaxtune._core")
    assert path_exists("_tuning/sweep/drive.py")
    assert path_exists("_tuning/sweep/drive.run_sweep")
    assert not path_exists("_tuning/sweep/planner.py")
    assert not path_exists("_tuning/sweep/plan.no_such_function")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_docstrings_name_only_what_exists(module: str) -> None:
    stale = [f"line {line}: {ref}" for line, ref, ok in _references(module) if not ok]
    assert not stale, f"{MODULES[module].relative_to(ROOT)} names what does not exist: {stale}"


def _development_paths() -> list[str]:
    text = DEVELOPMENT.read_text()
    found = []
    for literal in re.findall(r"`([^`\n]+)`", text):
        for match in PATH.finditer(literal):
            if "/" in match.group(0) or match.group(0).endswith(".py"):
                found.append(match.group(0))
    for block in re.findall(r"```\n(.*?)```", text, flags=re.S):
        found += [m.group(0) for m in PATH.finditer(block) if "/" in m.group(0)]
    return found


def test_development_guide_names_files_that_exist() -> None:
    paths = _development_paths()
    assert len(paths) > 20  # the guide's file lists were read
    missing = sorted({p for p in paths if not path_exists(p)})
    assert not missing, f"docs/development.md names files that do not exist: {missing}"
