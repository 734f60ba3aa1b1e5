"""The house rules of DESIGN.md that code review alone lets slip: which way imports run, the floors
inside ``gateway/``, no cycles, no reaching into another package's private modules, small modules and
folders.

Read from the source with ``ast`` (nothing is imported), so a violation anywhere fails here even
in a module no other test loads.  Imports under ``if TYPE_CHECKING:`` are left out of the package
layering and the first cycle check (they are for the type checker and run nothing), but counted by
the floors and by a second cycle check: a type-only import still ties two modules together.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "router", "tiers", "cache", "admin_ui")
MAX_MODULE_LINES = 400
MAX_FOLDER_ENTRIES = 14  # modules and sub-packages of one package: "about a dozen"

# What a package may never import (DESIGN.md, "Which way the imports run").
FORBIDDEN = {
    "gateway": ("admin_ui",),
    "router": (
        "gateway",
        "cache",
        "admin_ui",
        "tiers.edge",
        "tiers.cloud",
        "tiers.embedding",
        "tiers.speech",
    ),
    "cache": ("gateway", "router", "admin_ui", "tiers"),
    "tiers": ("gateway", "router", "cache", "admin_ui"),
    "tiers.edge": ("tiers.cloud", "tiers.embedding", "tiers.speech"),
    "tiers.cloud": ("tiers.edge", "tiers.embedding", "tiers.speech"),
    "tiers.embedding": ("tiers.edge", "tiers.cloud", "tiers.speech"),
    "tiers.speech": ("tiers.edge", "tiers.cloud", "tiers.embedding"),
    "admin_ui": ("router", "tiers", "cache"),
}

# The floors inside gateway/, bottom first (docs/architecture.md, "Floors inside gateway/"): a module
# may import its own floor and those below it, never one above, type-only imports included.  Each name
# is a sub-package or module of gateway/; "" is gateway/__init__.py itself.
GATEWAY_FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors",),  # the one exception tree
    ("wire",),  # the OpenAI wire shapes: chat, Responses, completions, embeddings, audio
    ("ops", "residency"),  # metrics, logs, tracing, background work; the residency rules
    ("accounts", "media"),  # tenants, keys, limits, ledger, budgets; media fetch and decode
    ("pipeline",),  # the stages of a request
    ("settings",),  # the aggregator of every part's settings struct
    ("services",),  # the composition root: builds the parts from the settings
    ("api",),  # the HTTP face: controllers take the Services, frame the answers
    ("app",),  # the Litestar app: routes, middleware, plugins
    ("tools", "__main__", ""),  # the CLI and what it starts: the server (uvicorn), the appliance
)

# Upward imports inside gateway/ not removed yet, as (importer, imported) modules, each with why.
UPWARD_ALLOWED: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module, dotted
    target: str  # the imported module, dotted
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def sources() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


MODULES = {module_name(p): p for p in sources()}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _all_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, those under ``if TYPE_CHECKING:`` included."""
    return ast.walk(tree)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for other in node.orelse:
                yield other
                yield from _runtime_nodes(other)
            continue
        yield node
        yield from _runtime_nodes(node)


def imports_of(path: Path, *, type_only_too: bool = False) -> Iterator[Import]:
    importer = module_name(path)
    package = package_of(importer, path)
    nodes = _all_nodes if type_only_too else _runtime_nodes
    for node in nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield Import(importer, submodule if submodule in MODULES else source, node.lineno)


IMPORTS = [imp for path in MODULES.values() for imp in imports_of(path)]
FIRST_PARTY = [imp for imp in IMPORTS if imp.target.split(".")[0] in PACKAGES]
EVERY_IMPORT = [imp for path in MODULES.values() for imp in imports_of(path, type_only_too=True)]
FIRST_PARTY_TYPED_TOO = [imp for imp in EVERY_IMPORT if imp.target.split(".")[0] in PACKAGES]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_imports_run_one_way() -> None:
    wrong = [
        f"{imp.importer}:{imp.line} imports {imp.target}"
        for imp in FIRST_PARTY
        for owner, banned in FORBIDDEN.items()
        if _within(imp.importer, owner) and any(_within(imp.target, b) for b in banned)
    ]
    assert not wrong, "imports against the layering of DESIGN.md:\n" + "\n".join(wrong)


def gateway_floor(module: str) -> str:
    """The floor name of a gateway module: its sub-package or module under gateway/ ("" for gateway)."""
    return module.split(".")[1] if "." in module else ""


FLOOR_OF = {name: level for level, names in enumerate(GATEWAY_FLOORS) for name in names}


def upward(imports: list[Import], floors: dict[str, int]) -> list[str]:
    """The imports inside gateway/ from a lower floor to a higher one."""
    return [
        f"{imp.importer}:{imp.line} imports {imp.target} "
        f"({gateway_floor(imp.importer) or 'gateway'} is below {gateway_floor(imp.target) or 'gateway'})"
        for imp in imports
        if _within(imp.importer, "gateway")
        and _within(imp.target, "gateway")
        and floors[gateway_floor(imp.importer)] < floors[gateway_floor(imp.target)]
        and (imp.importer, imp.target) not in UPWARD_ALLOWED
    ]


def test_floor_check_sees_an_upward_import() -> None:
    floors = {"wire": 0, "pipeline": 1, "": 2}
    down = Import("gateway.pipeline.chat", "gateway.wire.chat", 1)
    up = Import("gateway.wire.chat", "gateway.pipeline.chat", 2)
    to_root = Import("gateway.wire.chat", "gateway", 3)
    assert upward([down], floors) == []
    assert upward([up, to_root], floors) == [
        "gateway.wire.chat:2 imports gateway.pipeline.chat (wire is below pipeline)",
        "gateway.wire.chat:3 imports gateway (wire is below gateway)",
    ]


def test_every_part_of_gateway_stands_on_a_floor() -> None:
    parts = {gateway_floor(m) for m in MODULES if _within(m, "gateway")}
    assert not parts - FLOOR_OF.keys(), f"put these in GATEWAY_FLOORS: {sorted(parts - FLOOR_OF.keys())}"
    assert not FLOOR_OF.keys() - parts, (
        f"GATEWAY_FLOORS names what is gone: {sorted(FLOOR_OF.keys() - parts)}"
    )


def test_no_import_runs_up_the_floors_of_gateway() -> None:
    wrong = upward(FIRST_PARTY_TYPED_TOO, FLOOR_OF)
    assert not wrong, "imports up the floors of gateway/ (tests/test_architecture.py, GATEWAY_FLOORS):\n" + (
        "\n".join(wrong)
    )


def test_upward_allowances_are_still_needed() -> None:
    seen = {(imp.importer, imp.target) for imp in FIRST_PARTY_TYPED_TOO}
    assert not UPWARD_ALLOWED - seen, (
        f"allowed upward imports no longer made: {sorted(UPWARD_ALLOWED - seen)}"
    )


def test_no_module_imports_another_packages_private_module() -> None:
    wrong = []
    for imp in FIRST_PARTY:
        parts = imp.target.split(".")
        private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
        if private is None:
            continue
        owner = ".".join(parts[:private])
        if not _within(imp.importer, owner):
            wrong.append(f"{imp.importer}:{imp.line} imports {imp.target}, private to {owner}")
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _graph(imports: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in imports:
        if imp.target in MODULES and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    return graph


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph(FIRST_PARTY))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycles_type_only_imports_included() -> None:
    cycles = _cycles(_graph(FIRST_PARTY_TYPED_TOO))
    assert not cycles, "import cycles, counting imports under TYPE_CHECKING:\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_fit_on_a_few_screens(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines (at most {MAX_MODULE_LINES})"


def test_no_folder_is_a_flat_heap() -> None:
    crowded = []
    for package in {package_of(m, p) for m, p in MODULES.items()}:
        folder = ROOT.joinpath(*package.split("."))
        entries = [p for p in folder.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()]
        if len(entries) > MAX_FOLDER_ENTRIES:
            crowded.append(f"{package}: {len(entries)}")
    assert not crowded, f"folders of more than {MAX_FOLDER_ENTRIES} modules: {crowded}"


TIER_MEMBERS = {"capabilities", "generate", "complete", "stream", "replicas"}


def _concrete_tier_classes() -> set[str]:
    """Classes of the backends (tiers.edge, tiers.cloud) that are tiers or parts of one: they
    define a member of the Tier or Pool protocol."""
    names = set()
    for module, path in MODULES.items():
        if _within(module, "tiers.edge") or _within(module, "tiers.cloud"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    members = {
                        m.name for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
                    }
                    if members & TIER_MEMBERS:
                        names.add(node.name)
    return names


def test_nothing_outside_tiers_checks_a_concrete_tier_class() -> None:
    concrete = _concrete_tier_classes()
    wrong = []
    for module, path in MODULES.items():
        if _within(module, "tiers"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
            ):
                classes = node.args[1] if len(node.args) > 1 else None
                named = [c for c in ast.walk(classes) if isinstance(c, ast.Name)] if classes else []
                wrong += [f"{module}:{node.lineno} isinstance(…, {c.id})" for c in named if c.id in concrete]
    assert not wrong, "\n".join(wrong)
