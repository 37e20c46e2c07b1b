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


def committer_classes() -> list[type]:
    """Every committer class ``committer_for`` makes (``COMMITTERS``), once each."""
    from magicfs.committers import COMMITTERS

    return sorted({cls for cls, _ in COMMITTERS.values()}, key=lambda c: c.__name__)


#: The most public names a committer class may have (issue 56): the user's verbs
#: (Hadoop's ``OutputCommitter``: set-up, task attempt, commit and abort of tasks and
#: the job, clean-up) and what users read today (docs/api.md: ``job_id``, ``dest``,
#: ``fs``, ``storage_options``...). The protocol's hooks are its ``flow``'s.
MOST_PUBLIC_NAMES = 25


@pytest.mark.parametrize("cls", committer_classes(), ids=lambda c: c.__name__)
def test_a_committer_shows_the_users_verbs_only(cls):
    public = sorted(name for name in dir(cls) if not name.startswith("_"))
    assert len(public) <= MOST_PUBLIC_NAMES, f"{cls.__name__}: {len(public)} public names: {public}"
    # the hooks are the flow's, not the committer's
    hooks = {"commit_task_files", "publish", "load_records", "clean_up", "end_job", "prepare_job"}
    assert hooks.isdisjoint(public), f"{cls.__name__} shows hooks: {hooks & set(public)}"


def test_a_committer_holds_its_options_as_a_frozen_value():
    import dataclasses

    from magicfs.protocol.hooks import CommitterHooks
    from magicfs.protocol.options import CommitterOptions

    assert dataclasses.is_dataclass(CommitterOptions)
    assert CommitterOptions.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert CommitterOptions not in CommitterHooks.__mro__  # composition, not inheritance


def store_hooks_classes() -> list[type]:
    """The store hooks every registered deferred store makes, and the generic ones."""
    from magicfs.stores.job_hooks import DeferredJobHooks
    from magicfs.stores.registry import DEFERRED_STORES

    found = {DeferredJobHooks}
    found |= {spec.job_hooks for spec in DEFERRED_STORES if isinstance(spec.job_hooks, type)}
    return sorted(found, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", store_hooks_classes(), ids=lambda c: c.__name__)
def test_store_hooks_are_given_the_job_not_the_committer(cls):
    """A store's hooks see the job through its narrow interface (``LayoutJob``): no
    signature of theirs names a committer class, a flow or the protocol's hooks."""
    import inspect

    forbidden = {c.__name__ for c in committer_classes()}
    forbidden |= {c.flow_class.__name__ for c in committer_classes()}
    forbidden |= {"OutputCommitter", "CommitterHooks"}
    named = []
    for name, member in inspect.getmembers(cls, inspect.isfunction):
        for annotation in member.__annotations__.values():
            text = annotation if isinstance(annotation, str) else repr(annotation)
            named += [f"{name}: {word}" for word in forbidden if word in text]
    assert named == []
    job = inspect.signature(cls.__init__).parameters["job"].annotation
    assert job == "LayoutJob"


def test_a_magic_layout_jobs_store_hooks_hold_the_job_object_and_it_pickles():
    """What the hooks are given at run time is the job object, not the committer nor its
    flow; it travels with the committer and gets the unpickled process's statistics."""
    import pickle

    import fsspec

    import magicfs
    from magicfs.committers.layout_job import MagicLayoutJob

    fs = fsspec.filesystem("mem-deferred")
    committer = magicfs.committer_for("mem-deferred://layers/out", fs=fs)
    public = [name for name in dir(committer) if not name.startswith("_")]  # with `flow`
    assert len(public) <= MOST_PUBLIC_NAMES, public
    hooks = committer.flow.store_hooks
    assert type(hooks.job) is MagicLayoutJob
    assert hooks.job is committer.flow.job
    copy = pickle.loads(pickle.dumps(committer))
    assert copy.flow.store_hooks.job is copy.flow.job
    assert copy.flow.job.stats is copy.stats and copy.stats is not committer.stats
