"""The core's rooms import one way, and no module of the SDK imports itself in a circle.

The rooms of `coreagent_sdk` (docs/contributing.md has the map) stand on each other in one
order: the base modules, then `_http` and `_telemetry`, `_attach`, `_peer` and `_runtime`,
`_records`, `_display`, and on top the public modules and the `host`/`models` packages (and
any bridge added beside them). This reads every import of every module from its source,
type-only and function-level ones included, so an arrow drawn the wrong way fails here
rather than in a reader's head. The one upward import allowed is a value's `__repr__` /
`_repr_html_` reaching its renderer in `_display` when it runs.
"""

from __future__ import annotations

import ast
import pathlib

import coreagent_sdk

PACKAGE = pathlib.Path(coreagent_sdk.__file__).parent

BASE = frozenset({"errors", "_scrub", "_unshown", "_clock", "_traceback", "_version", "jupyter"})
# Rank of each room: a module may import its own room or a room of a lower rank; two rooms
# of one rank stand side by side and import neither each other.
RANKS = {"_http": 1, "_telemetry": 1, "_attach": 2, "_peer": 3, "_runtime": 3, "_records": 4}
RANKS["_display"] = 5
SURFACE = 6  # __init__, widgets, plots, pytest_plugin, host/, models/ and any bridge
DISPLAY_METHODS = ("__repr__", "__str__", "_repr_")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, pathlib.Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    assert "coreagent_sdk._peer._call_peer" in found  # the walk sees the rooms
    return found


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def rank(module: str) -> int:
    name = room(module)
    if name in BASE:
        return 0
    return RANKS.get(name, SURFACE)


class Import:
    def __init__(self, target: str, line: int, function: str | None) -> None:
        self.target, self.line, self.function = target, line, function


def imports_of(module: str, path: pathlib.Path, known: dict[str, pathlib.Path]) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = child.name
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    source = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    source = child.module or ""
                if source.split(".")[0] == "coreagent_sdk":
                    for alias in child.names:
                        sub = f"{source}.{alias.name}"
                        target = sub if sub in known else source
                        found.append(Import(target, child.lineno, inner))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "coreagent_sdk":
                        found.append(Import(alias.name, child.lineno, inner))
            visit(child, inner)

    visit(tree, None)
    return found


def all_imports() -> dict[str, list[Import]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def test_every_import_between_rooms_points_down_the_map() -> None:
    wrong = []
    for module, found in all_imports().items():
        for one in found:
            if one.target == "coreagent_sdk" and one.function is not None:
                wrong.append(f"{module}:{one.line} imports the package root inside a function")
                continue
            here, there = room(module), room(one.target)
            if here == there or (one.target == "coreagent_sdk" and rank(module) == SURFACE):
                continue
            if rank(one.target) < rank(module):
                continue
            if rank(module) == 0 and rank(one.target) == 0:
                continue  # the base modules stand on each other (no circle: below)
            if rank(module) == SURFACE and rank(one.target) == SURFACE:
                continue  # the surface and its bridges may use each other (no circle: below)
            renderer = one.target.startswith("coreagent_sdk._display.")
            if renderer and (one.function or "").startswith(DISPLAY_METHODS):
                continue
            wrong.append(f"{module}:{one.line} imports {one.target} ({here} -> {there})")
    assert wrong == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm; the graph is small
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return circles


def test_no_module_imports_itself_through_others_not_even_for_types_only() -> None:
    # Module-level imports, `if TYPE_CHECKING:` blocks included; an import inside a function
    # runs after every module has loaded and draws no circle a reader must untangle, except
    # that the package root imports everything, so importing it from a function is refused
    # above.
    graph = {
        module: {one.target for one in found if one.function is None and one.target != module}
        for module, found in all_imports().items()
    }
    graph["coreagent_sdk"] = set()  # the curated surface imports everything; nothing imports it
    assert strongly_connected(graph) == []


def test_the_map_in_contributing_names_every_room_and_what_it_may_import() -> None:
    text = (PACKAGE.parent / "docs" / "contributing.md").read_text(encoding="utf-8")
    rooms = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name.startswith("_"))
    rooms = [name for name in rooms if name != "__pycache__"]
    assert rooms == sorted(RANKS)
    missing = [name for name in rooms if f"`{name}/`" not in text]
    assert missing == []


def test_the_walk_sees_a_back_arrow_when_one_is_drawn(tmp_path: pathlib.Path) -> None:
    # The check above cannot pass vacuously: a module of a low room that imported a high one
    # at module level is reported with its line.
    probe = tmp_path / "probe.py"
    probe.write_text("from .._records._calllog import CallLog\n", encoding="utf-8")
    found = imports_of(
        "coreagent_sdk._http._probe", probe, {"coreagent_sdk._records._calllog": PACKAGE}
    )
    assert [(one.target, one.line, one.function) for one in found] == [
        ("coreagent_sdk._records._calllog", 1, None)
    ]
    assert rank(found[0].target) > rank("coreagent_sdk._http._probe")
