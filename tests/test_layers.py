"""No module of magicfs imports a layer above its own (docs/architecture.md).

The layers, lowest first, as docs/architecture.md's table states them. Every module must belong
to one (a new file fails here until it is placed), and every relative import must point
at its own layer or one below.
"""

from __future__ import annotations

import ast
import pathlib

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
    """The magicfs modules ``source`` imports (relative imports, resolved)."""
    package = ["magicfs", *source.relative_to(PACKAGE).parent.parts]
    found = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package[: len(package) - node.level + 1])
            if node.module:
                found.append(f"{base}.{node.module}")
            else:
                found += [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("magicfs.")]
    return found


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
