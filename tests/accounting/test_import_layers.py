"""The imports of ``src/ampfl/accounting`` form layers (issue 29): no cycle, and no accountant imports a paper
module. Read from the source (every ``import``, at module level or inside a function, ``TYPE_CHECKING``
included), not from ``sys.modules``. String references of the mechanism registry are not imports: the
registry is the one place that names the papers' bounds."""

from __future__ import annotations

import ast
from pathlib import Path

import ampfl.accounting

ROOT = Path(ampfl.accounting.__file__).parent
PREFIX = "ampfl.accounting"
PAPERS = ("partition", "random_checkin", "ms_pafl", "groups", "pm_sfl", "audit")


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((PREFIX, *parts))] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the accounting modules it imports (``from pkg import submodule`` counts as the submodule)."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(filter(None, (known(a.name) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                subs = [f"{base}.{a.name}" for a in node.names]
                if all(s in modules for s in subs):
                    targets.update(subs)
                else:
                    targets.update(filter(None, (known(base),)))
                    targets.update(s for s in subs if s in modules)
        graph[name] = targets - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


GRAPH = _imports(_modules())


def test_the_graph_is_read() -> None:
    assert f"{PREFIX}.mechanisms" in GRAPH[f"{PREFIX}.accountants.rdp"]
    assert f"{PREFIX}.events" in GRAPH[f"{PREFIX}.mechanisms"]


def test_a_cycle_is_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_accounting_imports_form_no_cycle() -> None:
    assert _cycles(GRAPH) == []


def _is_paper(module: str) -> bool:
    rest = module.removeprefix(PREFIX + ".")
    return rest.split(".")[0] in PAPERS


#: What the accountants may import: each other, the registry and the foundation below it.
BELOW_ACCOUNTANTS = {
    f"{PREFIX}.{name}"
    for name in ("_checks", "_numerics", "events", "mechanisms", "orders", "pld_grid", "relations")
}


def test_no_accountant_imports_a_paper_module() -> None:
    """The accountants reach every bound through the registry: they import nothing but each other, the
    registry and the foundation (no paper, no kernel such as ``rdp`` or ``subsampling``)."""
    bad = {
        name: sorted(
            t for t in targets if not t.startswith(f"{PREFIX}.accountants") and t not in BELOW_ACCOUNTANTS
        )
        for name, targets in GRAPH.items()
        if name.startswith(f"{PREFIX}.accountants")
        or name in (f"{PREFIX}.unamplified", f"{PREFIX}.mechanisms")
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_registry_and_the_kernels_import_nothing_above_them() -> None:
    """The registry imports only the events; the core bounds import no accountant, no paper and no
    calibration (they sit below all three)."""
    assert GRAPH[f"{PREFIX}.mechanisms"] <= {f"{PREFIX}.events", PREFIX}
    core = GRAPH[f"{PREFIX}.core_bounds"]
    above = {t for t in core if _is_paper(t) or t == f"{PREFIX}.calibrate"}
    above |= {
        t
        for t in core
        if t.startswith(f"{PREFIX}.accountants")
        and t.rpartition(".")[2] not in ("pld_fast", "pld_dense", "rdp_wor")
    }
    assert above == set()
