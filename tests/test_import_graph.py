"""The import graph of src/hotloop has no cycles, lazy imports included (layers point down)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the hotloop modules it imports anywhere in its file (top level, in functions, under
    TYPE_CHECKING): every `import a.b` and `from a.b import c` that names a module of the tree."""
    modules = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                # A package's own submodules, or a module importing its parent package, are not edges.
                inside = name.startswith(target + ".") or target.startswith(name + ".")
                if target in modules and target != name and not inside:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_and_a_clean_graph_has_none() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_src_has_no_import_cycles() -> None:
    graph = import_graph(SRC)
    assert "hotloop.compile.plan" in graph and graph["hotloop.compile.plan"]  # the walk sees imports
    found = cycles(graph)
    assert not found, "import cycles (lazy imports count): " + "; ".join(" <-> ".join(c) for c in found)


def test_only_models_and_the_pi_family_name_pis_types() -> None:
    offenders = []
    for path in (SRC / "hotloop").rglob("*.py"):
        rel = path.relative_to(SRC / "hotloop").as_posix()
        if rel.startswith(("models/", "families/pi/")):
            continue
        text = path.read_text()
        if any(name in text for name in ("PiModel", "PiObservation", "PiConfig")):
            offenders.append(rel)
    assert not offenders, f"pi's types named outside models/ and families/pi/: {offenders}"
