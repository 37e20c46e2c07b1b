"""No module of magicfs imports a layer above its own (docs/architecture.md).

The layers, lowest first, as docs/architecture.md's table states them. Every module must belong
to one (a new file fails here until it is placed), and every relative import must point
at its own layer or one below.
"""

from __future__ import annotations

import ast
import pathlib

import networkx
import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "magicfs"

#: (layer, members), lowest first: every layer but the foundations is a folder of its own
#: (a member ending in "/"); the top-level files are the foundations, which the public API
#: names (``magicfs.paths``, ``magicfs.errors``), and the public doors of the integrations.
LAYERS = [
    (
        "foundations",
        [
            "names.py",
            "paths.py",
            "errors.py",
            "statistics.py",
            "progress.py",
            "task_files.py",
            "parallel.py",
            "lifecycle.py",
            "job_context.py",
        ],
    ),
    ("records", ["records/"]),
    ("stores", ["stores/"]),
    ("layouts", ["layouts/"]),
    ("filesystems", ["filesystems/"]),
    ("protocol", ["protocol/"]),
    ("committers", ["committers/"]),
    ("readers", ["readers/"]),
    (
        "integrations",
        [
            "integrations/",
            "__init__.py",
            "__main__.py",
            "dask.py",
            "duckdb.py",
            "ray.py",
            "spark.py",
        ],
    ),
]


def layer_of(relative: str) -> int | None:
    best: tuple[int, int] | None = None
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            hit = relative.startswith(member) if member.endswith("/") else relative == member
            if hit and (best is None or len(member) > best[1]):
                best = (index, len(member))
    return None if best is None else best[0]


def module_file(dotted: str) -> str | None:
    """``magicfs.stores.s3.store`` -> ``s3/store.py`` (or the package's ``__init__.py``)."""
    path = PACKAGE.joinpath(*dotted.split(".")[1:])
    if path.with_suffix(".py").is_file():
        return str(path.with_suffix(".py").relative_to(PACKAGE))
    if (path / "__init__.py").is_file():
        return str((path / "__init__.py").relative_to(PACKAGE))
    return None


def imports_of(source: pathlib.Path) -> list[str]:
    """The magicfs modules ``source`` imports (relative imports resolved), wherever the
    import stands: in a function, or under ``TYPE_CHECKING`` (mypy and a reader follow
    those too). ``from . import x`` imports the package itself first (its
    ``__init__.py`` runs), then ``x``: both count."""
    package = ["magicfs", *source.relative_to(PACKAGE).parent.parts]
    found = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level or _ours(node.module)):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            if node.module:
                found.append(f"{base}.{node.module}" if base else node.module)
            else:
                found.append(base)
                found += [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("magicfs.")]
    return found


def _ours(module: str | None) -> bool:
    return module is not None and (module == "magicfs" or module.startswith("magicfs."))


MODULES = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []


@pytest.mark.parametrize("module", MODULES)
def test_imports_point_at_the_same_layer_or_below(module):
    own = layer_of(module)
    assert own is not None
    upward = []
    for dotted in imports_of(PACKAGE / module):
        target = module_file(dotted)
        if target is not None and (layer_of(target) or 0) > own:
            upward.append(f"{target} ({LAYERS[layer_of(target) or 0][0]})")
    assert upward == [], f"{module} ({LAYERS[own][0]}) imports a layer above it: {upward}"


#: The modules outside stores/ that may import one store's own modules: the staging
#: committers are S3 only by definition (they stage multipart uploads).
STORE_SPECIFIC = {"committers/staging.py"}


@pytest.mark.parametrize("module", [m for m in MODULES if not m.startswith("stores/")])
def test_only_the_stores_know_a_store(module):
    """Store knowledge lives below stores/ (issue 37): no other module imports a store's
    folder (stores/s3/, stores/azure/, ...); each asks the registry instead."""
    own = [
        dotted
        for dotted in imports_of(PACKAGE / module)
        if (target := module_file(dotted)) is not None
        and target.startswith("stores/")
        and target.count("/") > 1
    ]
    assert own == [] or module in STORE_SPECIFIC, f"{module} imports a store's own module: {own}"


def import_graph() -> networkx.DiGraph:
    """Every module of magicfs, an edge to each module it imports (:func:`imports_of`)."""
    graph = networkx.DiGraph()
    for module in MODULES:
        graph.add_node(module)
        for dotted in imports_of(PACKAGE / module):
            target = module_file(dotted)
            if target is not None and target != module:
                graph.add_edge(module, target)
    return graph


def test_no_import_loops():
    """No module imports itself through others (issue 56): a loop is one module in
    several files, which a reader cannot read in order and Python may import half-done.
    Each loop is reported as its modules (a strongly connected component of the graph)."""
    loops = [
        sorted(component)
        for component in networkx.strongly_connected_components(import_graph())
        if len(component) > 1
    ]
    assert sorted(loops) == [], f"modules importing each other in a loop: {sorted(loops)}"


def test_the_loop_finder_finds_a_loop():
    """The check above can fail: two modules that import each other make a loop."""
    graph = import_graph()
    graph.add_edge("protocol/options.py", "protocol/committer.py")  # committer imports options
    found = [c for c in networkx.strongly_connected_components(graph) if len(c) > 1]
    assert {"protocol/options.py", "protocol/committer.py"} <= set().union(*found)
