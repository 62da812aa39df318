"""The package's shape: layers that only point down, no module reaching into another's
private names, no import cycles, a top level that holds only the doorway, and no state
kept at module level outside each layer's ``ProcessState``."""

from __future__ import annotations

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parent.parent / "jaxtune"
TOP_LEVEL = {"__init__.py", "__main__.py", "flags.py", "py.typed"}
#: The packages from the bottom up (docs/development.md): a module may import its own
#: package and the packages of lower layers, never one of its own layer or above.
LAYERS = [
    {"_core"},
    {"_program", "_isolation", "_render"},
    {"_distributed"},
    {"_tuning"},
    # A profile reports the tuning flow's facts about the autotuned calls it saw (their
    # cost hints, configs and tuned speedups, the recorded call ``tune --from-profile``
    # replays): it reads them from the tuning flow, which never reads a profile.
    {"_profiling"},
    {"jaxtune"},  # the doorway: ``__init__`` (public names, re-exported) and ``flags``
    {"examples", "kernels"},  # kernels as users write them (JAX's wrapped too), via the doorway
    {"_cli"},  # ``jaxtune demo`` runs the examples
    {"__main__"},
]
SUBPACKAGES = set().union(*LAYERS) - {"jaxtune", "__main__"}


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


def test_top_level_holds_only_the_doorway_and_the_layer_packages():
    entries = {p.name for p in PKG.iterdir() if p.name != "__pycache__"}
    assert entries - TOP_LEVEL - SUBPACKAGES == set()
    assert entries >= SUBPACKAGES


def _package(module: str) -> str:
    """The layer package a module belongs to (``jaxtune`` for the doorway's modules)."""
    parts = module.split(".")
    if parts[1:] == ["__main__"]:
        return "__main__"
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "jaxtune"


def _layer(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def _all_imports(name: str) -> list[tuple[str, int]]:
    """Every jaxtune module ``name`` imports, with the line: top level, inside functions
    and under ``TYPE_CHECKING`` alike."""
    is_package = MODULES[name].name == "__init__.py"
    found = []
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, is_package, node.level, node.module)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.append((full if full in MODULES else target, node.lineno))
    return [(m, line) for m, line in found if m == "jaxtune" or m.startswith("jaxtune.")]


def test_imports_point_down_the_layers():
    offences = []
    for name in MODULES:
        here = _package(name)
        for module, line in _all_imports(name):
            there = _package(module)
            if there != here and _layer(there) >= _layer(here):
                offences.append(f"{name}:{line} imports {module} ({here} -> {there})")
    assert offences == []


def test_the_layer_check_sees_function_level_and_type_checking_imports():
    """The check itself: an upward import inside a function or under ``TYPE_CHECKING``
    counts (parsed from source, as the test reads the package)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .._tuning.result import Entry\n"
        "def f():\n    from .._cli import main\n"
    )
    name = "jaxtune._core.probe"
    MODULES[name], TREES[name] = PKG / "_core" / "probe.py", ast.parse(source)
    try:
        imported = {m for m, _ in _all_imports(name)}
    finally:
        del MODULES[name], TREES[name]
    assert imported == {"jaxtune._tuning.result", "jaxtune._cli"}


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


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each import circle of ``graph`` (module -> modules it imports), as ``a -> b -> a``."""
    # A package's __init__ re-exporting its children is not a cycle of behaviour.
    graph = {
        name: {m for m in imported if not name.startswith(m + ".")}
        for name, imported in graph.items()
    }
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
    return cycles


def _import_graph() -> dict[str, set[str]]:
    """Every jaxtune module to the jaxtune modules it imports: at module level, inside a
    function and under ``TYPE_CHECKING`` alike. A deferred or annotation-only import still
    makes the two modules need each other (the sweep's engine and plan once did so under
    ``TYPE_CHECKING``); the way out is a leaf module both import, not a hidden import."""
    return {
        name: {m for m, _ in _all_imports(name) if m in MODULES and m != name} for name in MODULES
    }


def test_no_import_cycles():
    assert _cycles(_import_graph()) == []


def test_the_cycle_check_sees_function_level_and_type_checking_imports():
    """The check itself: a circle closed only under ``TYPE_CHECKING`` or inside a function
    counts, as the engine <-> plan circle of the sweep did before the plan's types moved to
    ``sweep/work.py``."""
    probes = {
        "jaxtune._core.probe_a": "from . import probe_b, probe_c\n",
        "jaxtune._core.probe_b": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import probe_a\n"
        ),
        "jaxtune._core.probe_c": "def f():\n    from . import probe_a\n",
    }
    for name, source in probes.items():
        MODULES[name], TREES[name] = (
            PKG / "_core" / f"{name.rsplit('.', 1)[1]}.py",
            ast.parse(source),
        )
    try:
        cycles = _cycles(_import_graph())
    finally:
        for name in probes:
            del MODULES[name], TREES[name]
    assert cycles == [
        "jaxtune._core.probe_a -> jaxtune._core.probe_b -> jaxtune._core.probe_a",
        "jaxtune._core.probe_a -> jaxtune._core.probe_c -> jaxtune._core.probe_a",
    ]


def test_the_sweep_plan_and_task_live_in_a_leaf_of_the_sweep():
    """``sweep/work.py`` (``SweepPlan``, ``SweepTask``) imports no other sweep module but the
    plain values it holds, so the engine and the plan that drives it both read it."""
    imported = {m for m, _ in _all_imports("jaxtune._tuning.sweep.work")}
    sweep = {m for m in imported if m.startswith("jaxtune._tuning.sweep.")}
    assert sweep <= {"jaxtune._tuning.sweep.search", "jaxtune._tuning.sweep.samples"}
    assert "jaxtune._tuning.sweep.drive" not in {
        m for m, _ in _all_imports("jaxtune._tuning.sweep.engine")
    }


#: The most lines a class of the sweep may span: one job each (issue 47 split the
#: 558-line ``Sweeper`` into the compiler, first runs, stopwatch and first pass).
MOST_CLASS_LINES = 250


def test_no_class_of_the_sweep_does_several_jobs():
    """Each class of ``_tuning/sweep`` stays within :data:`MOST_CLASS_LINES`: a class that
    grows past it is doing a second job, which belongs in a module of its own."""
    sweep = PKG / "_tuning" / "sweep"
    long = [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted(sweep.glob("*.py"))
        for node in ast.walk(TREES[_module_name(path)])
        if isinstance(node, ast.ClassDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MOST_CLASS_LINES
    ]
    assert long == []


def test_the_engines_modules_sit_below_the_orchestration():
    """The work where the kernel runs (compile, first runs, first pass, stopwatch, and the
    ``Sweeper`` over them) imports neither the loop that drives it (``drive``) nor where it
    runs (``runner``, ``serve``, ``requests``): those hand it work through its methods."""
    engine = ["engine", "compile", "first_run", "first_pass", "measure", "backward"]
    above = {f"jaxtune._tuning.sweep.{m}" for m in ("drive", "runner", "serve", "requests")}
    reached = {
        f"{m} -> {imported}"
        for m in engine
        for imported, _ in _all_imports(f"jaxtune._tuning.sweep.{m}")
        if imported in above
    }
    assert reached == set()


def test_the_sweep_folder_says_where_each_module_runs():
    """Every module of ``_tuning/sweep/`` is named once in its package's groups (parent,
    wire, kernel side, both sides), and neither the kernel side, the wire nor what both
    sides read imports a module of the parent's: the child never needs the parent's code."""
    from jaxtune._tuning import sweep

    groups = {
        "parent": sweep.PARENT,
        "wire": sweep.WIRE,
        "kernel side": sweep.KERNEL_SIDE,
        "both": sweep.BOTH,
    }
    named = [m for members in groups.values() for m in members]
    prefix = "jaxtune._tuning.sweep."
    folder = {n[len(prefix) :] for n in MODULES if n.startswith(prefix)}
    assert sorted(named) == sorted(folder)  # each once, none left out
    # A module's docstring that opens with where it runs says its group's words.
    tags = {
        "parent": "Parent side.",
        "wire": "Wire.",
        "kernel side": "Kernel side.",
        "both": "Both sides.",
    }
    wrong = {
        f"{m}: {where}, opens {doc.split('.')[0]!r}"
        for where, members in groups.items()
        for m in members
        if (doc := ast.get_docstring(TREES[prefix + m]) or "").startswith(
            tuple(t for t in tags.values())
        )
        and not doc.startswith(tags[where])
    }
    assert wrong == set()
    parent = {prefix + m for m in sweep.PARENT}
    reached = {
        f"{m} ({where}) -> {imported}"
        for where, members in groups.items()
        if where != "parent"
        for m in members
        for imported, _ in _all_imports(prefix + m)
        if imported in parent
    }
    assert reached == set()


#: Module-level containers that hold no state of the process: tables fixed at import.
CONSTANT_TABLES = {
    "jaxtune._core.entry_schema._KINDS",
    "jaxtune._tuning.staleness._WORDS",
    "jaxtune._tuning.sweep.lowering_pool._TOPOLOGIES",
    "jaxtune._tuning.sweep.refusals._SCOPED_VMEM",
    "jaxtune._LAZY",
    "jaxtune._cli.cache._ACTIONS",
    "jaxtune._cli.cache_sync.ACTIONS",
    "jaxtune._cli.demo.SHAPES",
    "jaxtune._core.arrays._SHORT",
    "jaxtune._core.codec.ENUMS",
    "jaxtune._core.flags.LEGACY_NAMES",
    "jaxtune._core.settings._BY_FIELD",
    "jaxtune._core.typed._NAMES",
    "jaxtune._core.xspace.schema._MESSAGES",
    "jaxtune._core.xspace.schema._MAP_ENTRIES",
    "jaxtune._isolation.frames._ERROR_CLASSES",
    "jaxtune._isolation.frames._KIND_OF_CLASS",
    "jaxtune._isolation.frames._REPLIES",
    "jaxtune._profiling.html._KIND_COLOURS",
    "jaxtune._profiling.html._SOURCE_MARKERS",
    "jaxtune._profiling.mosaic_work._DTYPE_BYTES",
    "jaxtune._profiling.mosaic_work._SIGNED",
    "jaxtune._profiling.mosaic_work._UNSIGNED",
    "jaxtune._profiling.table.BOUND_HELP",
    "jaxtune._profiling.table._OVERCOUNT",
    "jaxtune._tuning.options.EFFORTS",
    "jaxtune._tuning.report_html.STAGES",
    "jaxtune._tuning.report_html._PASSES",
    "jaxtune._tuning.sweep.check._AUTO_TOLERANCE",
    "jaxtune._tuning.sweep.search.STRATEGIES",
    "jaxtune._tuning.sweep.timers.TIMERS",
}
#: Memos of pure functions, or of what is installed (fixed for the process's life).
FIXED_MEMOS = {
    "jaxtune._cli.doctor_checks.embedded_llo",
    "jaxtune._core.arrays.key_impl",
    "jaxtune._core.arrays.key_dtype",
    "jaxtune._core.flags._contains_word",
    "jaxtune._core.typed._writer",
    "jaxtune._core.typed._reader",
    "jaxtune._tuning.sweep.intervals.rank",
    "jaxtune._tuning.sweep.heap._libc",
}
#: No state to reset: one decode's depth, per thread; ids unique for the process's life; a
#: thread's warm heap, given back when the thread ends.
NO_STATE = {
    "jaxtune._core.codec._DEPTH",
    "jaxtune._tuning.result._IDS",
    "jaxtune._tuning.sweep.heap._local",
}
#: Still to become parts of the tuning state, in modules of the sweep another change is
#: editing: the compilation cache jaxtune enabled (a cell its enable and restore share).
NOT_YET: set[str] = set()
NOT_STATE = CONSTANT_TABLES | FIXED_MEMOS | NO_STATE | NOT_YET

#: Calls that make a mutable container (a registry when kept at module level).
_CONTAINERS = {
    "dict", "list", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "deque",
    "WeakSet", "WeakValueDictionary", "WeakKeyDictionary", "local", "count",
}  # fmt: skip
_MEMOS = {"cache", "lru_cache", "cached_property"}


def _callee(node: ast.expr) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _module_state(tree: ast.Module) -> list[tuple[str, int]]:
    """``(name, line)`` of each module-level registry of ``tree`` that no ``ProcessState``
    holds: a mutable container assigned at the top level (a literal, a comprehension or a
    container's constructor; ``X_STATE.keep(...)`` is held), a function memoized there
    (``functools.cache``/``lru_cache``) without ``X_STATE.memo``, and a ``global``
    statement anywhere (a module variable rebound from inside a function)."""
    found = []
    literals = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            mutable = isinstance(value, literals) or (
                isinstance(value, ast.Call) and _callee(value) in _CONTAINERS
            )
            for target in targets:
                if mutable and isinstance(target, ast.Name) and target.id != "__all__":
                    found.append((target.id, node.lineno))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = {_callee(d) for d in node.decorator_list}
            if names & _MEMOS and "memo" not in names:
                found.append((node.name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found += [(name, node.lineno) for name in node.names]
    found += _set_globally(tree)
    return found


def _set_globally(tree: ast.Module) -> list[tuple[str, int]]:
    """``(name, line)`` of each ``NAME.set_global(...)`` of a module-level ``NAME`` (a JAX
    user context's value for the whole process, set by jaxtune) outside a function its
    layer's state ``resets``."""
    module_names = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }
    declared: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            isinstance(d, ast.Call)
            and isinstance(d.func, ast.Attribute)
            and d.func.attr == "resets"
            and isinstance(d.func.value, ast.Name)
            and d.func.value.id.endswith("_STATE")
            for d in node.decorator_list
        ):
            declared |= {id(n) for n in ast.walk(node)}
    return [
        (node.func.value.id, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "set_global"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in module_names
        and id(node) not in declared
    ]


def test_state_kept_across_calls_lives_in_each_layers_process_state():
    """A new registry at module level fails here: declare it a part of its layer's
    ``ProcessState`` (``keep``, ``memo`` or ``resets``), so tests and readers find it and
    its reset, or, for a constant table, add it to :data:`NOT_STATE`."""
    found = {
        f"{module}.{name}": line
        for module, tree in TREES.items()
        for name, line in _module_state(tree)
    }
    assert sorted(f"{name}:{line}" for name, line in found.items() if name not in NOT_STATE) == []
    assert sorted(NOT_STATE - set(found)) == [], "NOT_STATE names what is no longer there"


def test_the_state_check_sees_containers_memos_and_globals():
    """The check itself: a dict kept at module level, a memoized function, a rebound module
    variable and a JAX user context set for the whole process are found; a container a
    ``ProcessState`` keeps, a memo it registers, a user context set only by a function it
    resets, a lock and ``__all__`` are not."""
    source = (
        "import functools, threading, jax\n"
        "from .state import CORE_STATE\n"
        "__all__ = ['f']\n"
        "_SEEN: dict[str, int] = {}\n"
        "_HELD = CORE_STATE.keep('held', dict, 'held')\n"
        "_LOCK = threading.Lock()\n"
        "_COUNT = jax.make_user_context(default_value=0)\n"
        "_OTHER = jax.make_user_context(default_value=0)\n"
        "@functools.cache\ndef f(): ...\n"
        "@CORE_STATE.memo('g', 'g')\n@functools.cache\ndef g(): ...\n"
        "def h():\n    global _LAST\n"
        "@CORE_STATE.resets('count', 'count')\n"
        "def bump():\n    _COUNT.set_global(_COUNT.get_global() + 1)\n"
        "def bump_other():\n    _OTHER.set_global(1)\n"
    )
    found = [n for n, _ in _module_state(ast.parse(source))]
    assert found == ["_SEEN", "f", "_LAST", "_OTHER"]


def test_each_layer_keeps_its_state_in_one_named_object():
    """Every layer with state has one ``state`` module holding one ``ProcessState``; a
    module declares parts only of its own layer's (or, in ``_core``, of ``CORE_STATE``),
    and no two declarations name one part (a module run as ``__main__`` and imported too
    declares its parts twice at run time, so the state itself allows that)."""
    offences = []
    declared: dict[tuple[str, str], str] = {}
    for name, tree in TREES.items():
        package = _package(name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in {"keep", "memo", "resets"}
                and isinstance(node.value, ast.Name)
                and node.value.id.endswith("_STATE")
            ):
                owner = node.value.id.removesuffix("_STATE").lower()
                if f"_{owner}" != package and not (owner == "core" and package == "_core"):
                    offences.append(f"{name}:{node.lineno} declares a part of {node.value.id}")
        for call in ast.walk(tree):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in {"keep", "memo", "resets"}
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id.endswith("_STATE")
                and call.args
                and isinstance(call.args[0], ast.Constant)
            ):
                part = (call.func.value.id, str(call.args[0].value))
                if part in declared:
                    offences.append(
                        f"{name}:{call.lineno} declares {part} again ({declared[part]})"
                    )
                declared[part] = f"{name}:{call.lineno}"
    assert offences == []
    assert len(declared) > 30  # the check sees the declarations


def _exchanges_left_open(source: str) -> list[int]:
    """Lines of ``source`` that call an ``exchange(...)`` other than as the argument of
    ``contextlib.closing(...)``."""
    tree = ast.parse(source)
    closed = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) in ("contextlib.closing", "closing")
        and node.args
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "exchange"
        and id(node) not in closed
    ]


def test_every_exchange_with_a_child_is_closed_where_it_is_read():
    """A child's exchange is a generator that holds the child's lock and leaves the child
    working until it is read to the end; a reader that stops early must close it at once
    (the child is then abandoned), not leave it to the garbage collector."""
    assert _exchanges_left_open("for item in service.exchange(m):\n    pass\n") == [1]
    assert _exchanges_left_open("with contextlib.closing(s.exchange(m)) as said:\n    pass\n") == []
    left = {
        name: lines
        for name, path in MODULES.items()
        if (lines := _exchanges_left_open(path.read_text()))
    }
    assert not left, left
