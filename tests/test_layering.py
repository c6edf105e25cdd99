"""The floor plan holds: imports between the package's folders flow one way, and no module import cycle exists.

Every ``from .x import`` / ``import noderag.x`` in ``src/noderag`` (also those inside functions) is an
edge; a package may import its own floor or any floor below it, never one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

SRC = Path(__file__).resolve().parents[1] / "src" / "noderag"

#: floor of each top-level module or package; imports go to the same floor or a lower one
FLOORS = {
    "_core": 0, "_version": 0, "_overrides": 0, "retry": 0, "errors": 0, "tokenize": 0, "lang": 0, "data": 0, "jsonl": 0,
    "graph": 1, "embed": 1, "llm": 1,
    "config": 2,
    "store": 3,
    "search": 4,
    "indexing": 5, "serve": 5, "export": 5,
    "api": 6, "eval": 6,
    "integrations": 7, "demo": 7,
    "cli": 8,
    "__init__": 9,  # the package facade: loads the API lazily; nothing imports it
}



def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the noderag modules ``path`` imports (relative imports resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("noderag"):
                out.update(f"{mod}.{a.name}" for a in node.names)  # resolved to ``mod`` unless x is a module
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("noderag"))
    return out


def _graph() -> nx.DiGraph:
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    g = nx.DiGraph()
    g.add_node("noderag._core")  # the compiled module: imports nothing of the package
    for name, path in modules.items():
        g.add_node(name)
        for target in _imports(path):
            while target not in modules and target != "noderag._core" and "." in target:
                target = target.rsplit(".", 1)[0]  # "from .x import Name" -> module x
            if (target in modules or target in g) and target != name:
                g.add_edge(name, target)
    return g


def _floor(module: str) -> tuple[str, int]:
    top = module.split(".")[1] if "." in module else "__init__"
    return top, FLOORS[top]


def test_every_top_level_module_has_a_floor():
    tops = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
            if (p.suffix in (".py", ".so") or (p.is_dir() and (p / "__init__.py").is_file()))}
    tops = {t.split(".")[0] for t in tops} - {"__init__"}
    assert tops <= set(FLOORS), f"add these to FLOORS: {sorted(tops - set(FLOORS))}"


def test_no_import_goes_up_a_floor():
    up = []
    for a, b in _graph().edges:
        (ta, fa), (tb, fb) = _floor(a), _floor(b)
        if ta != tb and fb > fa:
            up.append(f"{a} -> {b} ({ta} floor {fa} imports {tb} floor {fb})")
    assert not up, "\n".join(up)


def test_no_import_cycle_between_modules():
    g = _graph()
    cycles = [c for c in nx.simple_cycles(g) if len(c) > 1]
    assert not cycles, "\n".join(" -> ".join(c + [c[0]]) for c in cycles[:10])


def test_no_cycle_between_packages():
    g = nx.DiGraph()
    for a, b in _graph().edges:
        ta, tb = _floor(a)[0], _floor(b)[0]
        if ta != tb:
            g.add_edge(ta, tb)
    assert not list(nx.simple_cycles(g))
