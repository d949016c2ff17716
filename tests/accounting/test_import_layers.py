"""The imports of ``src/ampfl`` form layers. In ``accounting/``: no cycle, and no accountant imports a paper
module. Read from the source (every ``import``, at module level or inside a function, ``TYPE_CHECKING``
included), not from ``sys.modules``. String references of a registry are not imports: the mechanism
registry is the one place that names the papers' bounds, the algorithm table the one that names algorithms.

In the whole package: no cycle of imports that run (module level or inside a function), nothing below the
CLI imports a command, and nothing of the simulator or the deployment imports a reproduction. Imports under
``if TYPE_CHECKING:`` only name types for annotations; the cycles they still close are listed in
:data:`TYPE_ONLY_CYCLES`, which may shrink but not grow."""

from __future__ import annotations

import ast
from pathlib import Path

import ampfl.accounting

ROOT = Path(ampfl.accounting.__file__).parent
PREFIX = "ampfl.accounting"
PACKAGE_ROOT = ROOT.parent
PAPERS = ("partition", "random_checkin", "ms_pafl", "groups", "pm_sfl", "audit")


def _modules(root: Path = ROOT, prefix: str = PREFIX) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((prefix, *parts))] = path
    return out


def _without_type_checking(tree: ast.Module) -> ast.Module:
    """``tree`` less its ``if TYPE_CHECKING:`` blocks (their ``else`` kept)."""

    class Strip(ast.NodeTransformer):
        def visit_If(self, node: ast.If) -> ast.AST | list[ast.stmt] | None:
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                return node.orelse or None
            self.generic_visit(node)
            return node

    return Strip().visit(tree)


def _imports(modules: dict[str, Path], *, type_only: bool = True) -> dict[str, set[str]]:
    """module -> the listed modules it imports (``from pkg import submodule`` counts as the submodule);
    ``type_only=False`` leaves out the imports under ``if TYPE_CHECKING:``."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree if type_only else _without_type_checking(tree)):
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


PACKAGE = _modules(PACKAGE_ROOT, "ampfl")
RUNTIME = _imports(PACKAGE, type_only=False)
ALL_IMPORTS = _imports(PACKAGE)

#: Cycles closed only by imports under ``if TYPE_CHECKING:`` (annotations that name a type of a module above).
TYPE_ONLY_CYCLES = [
    [
        "ampfl.fl.algorithms",
        "ampfl.fl.algorithms.base",
        "ampfl.fl.config",
        "ampfl.fl.privacy.calibration",
        "ampfl.fl.privacy.run_accountant",
    ],
    ["ampfl.fl.algorithms.dp_sgd_partition", "ampfl.fl.algorithms.dp_sgd_partition_protocol"],
    ["ampfl.fl.algorithms.gdpfed_groups", "ampfl.fl.algorithms.gdpfed_protocol"],
    ["ampfl.fl.data.slot_grid", "ampfl.fl.data.slot_rows"],
    ["ampfl.fl.split.depthfl", "ampfl.fl.split.depthfl_protocol"],
]


def test_the_whole_package_is_read() -> None:
    assert "ampfl.fl.algorithms.fedavg" in PACKAGE and "ampfl.flower.client_app" in PACKAGE
    assert "ampfl.fl.algorithms.base" in RUNTIME["ampfl.fl.algorithms.fedavg"] | set().union(
        *(RUNTIME[m] for m in RUNTIME["ampfl.fl.algorithms.fedavg"])
    )
    stripped = _without_type_checking(ast.parse("if TYPE_CHECKING:\n    import a\nelse:\n    import b\n"))
    assert [n.names[0].name for n in ast.walk(stripped) if isinstance(n, ast.Import)] == ["b"]


def test_the_package_runs_no_import_cycle() -> None:
    assert _cycles(RUNTIME) == []


def test_type_only_cycles_do_not_grow() -> None:
    found = [sorted(c) for c in _cycles(ALL_IMPORTS)]
    assert [c for c in found if c not in [sorted(k) for k in TYPE_ONLY_CYCLES]] == []


def test_no_arrow_runs_up_to_the_cli_or_the_reproductions() -> None:
    below = {
        m: t for m, t in ALL_IMPORTS.items() if m.startswith(("ampfl.fl", "ampfl.flower", "ampfl.accounting"))
    }
    up = {
        m: sorted(x for x in t if x.startswith(("ampfl.reproduce", "ampfl.commands", "ampfl.cli")))
        for m, t in below.items()
    }
    assert {m: t for m, t in up.items() if t} == {}
    into_fl = {
        m: sorted(x for x in t if x.startswith(("ampfl.fl", "ampfl.flower")))
        for m, t in ALL_IMPORTS.items()
        if m.startswith("ampfl.accounting")
    }
    assert {m: t for m, t in into_fl.items() if t} == {}
