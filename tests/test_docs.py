"""The documentation cannot rot: it builds cleanly, its examples run, its links resolve.

* The Sphinx site in docs/ builds with warnings as errors (autodoc imports every public
  module, so a docstring that Sphinx cannot render fails here).
* Every ``python`` code block of the docs runs. ``>>>`` blocks are doctests; the others
  run in order, page by page, in one fresh process per page, with ``opts`` bound to the
  storage options of an embedded S3 server holding an empty bucket ``bkt`` (the examples
  say so), plus ``spark`` (a local SparkSession) on pages that use it. Ray examples get a
  local Ray that talks to nothing but 127.0.0.1. The README's blocks start their own
  server and run as pasted, each in a process of its own: tests/test_readme.py runs them.
* No page points at something a reader cannot follow: internal working documents, or a
  relative link to a file that does not exist.
* Every measured figure can be traced to what printed it: each table of figures names its
  script, test or quoted page, each section of the benchmarks page its commands, and
  every benchmark a page names exists and accepts the options given (the history
  appendix records what ran then, so only its scripts must exist).
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import json
import pathlib
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

import magicfs

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: The pages a reader gets: the README, the changelog and the site (drafts handed in by
#: other contributors are not part of it until placed).
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    + [p for p in DOCS.rglob("*.md") if "_drafts" not in p.parts and "_build" not in p.parts]
)

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w{}-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)


def code_blocks(page: pathlib.Path, lang: str = "python") -> list[tuple[int, str]]:
    """``(line number, code)`` of every fenced block of ``lang`` on ``page``, dedented."""
    text = page.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        if match["lang"] == lang:
            line = text.count("\n", 0, match.start("body")) + 1
            blocks.append((line, textwrap.dedent(match["body"])))
    return blocks


def page_id(page: pathlib.Path) -> str:
    return str(page.relative_to(ROOT))


def test_docs_build_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    api = (out / "api.html").read_text()
    for name in ("magicfs.write_job", "magicfs.committer_for", "magicfs.MagicFileSystem"):
        assert f'id="{name}"' in api, f"{name} missing from the API reference"
    assert "Parameters" in api  # the entry points' docstrings are rendered, not just named
    assert not (out / "_drafts").exists(), "docs/_drafts/ must not be built"
    for page in PAGES:
        if DOCS in page.parents:
            html = out / page.relative_to(DOCS).with_suffix(".html")
            assert html.is_file(), f"{page_id(page)} is not in the built site (add it to a toctree)"


def test_every_public_name_is_in_the_api_reference():
    api = (DOCS / "api.md").read_text()
    for name in magicfs.__all__:
        assert re.search(rf"\bmagicfs\.{name}\b", api), f"magicfs.{name} is not in docs/api.md"
    for module in (
        "magicfs.dask",
        "magicfs.ray",
        "magicfs.spark",
        "magicfs.records",
        "magicfs.errors",
    ):
        assert module in api, f"{module} is not in docs/api.md"


#: Words that point at working documents outside the repository (whose reader cannot
#: follow them). "round trip", "round-trip", Python's round() and random seeds are fine.
OUTSIDE_REFERENCES = [
    re.compile(r"(?<!random )\bseeds?\b(?! from \d)", re.I),  # random seeds are fine
    re.compile(r"\bAPI\.md\b"),
    re.compile(r"\bissues?\b|\bissue's\b", re.I),
    re.compile(r"\brounds?\b(?![- ]trip|\()", re.I),
    re.compile(r"shared/reference|/work/"),
]


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_pages_refer_to_nothing_outside_the_repository(page):
    text = page.read_text()
    for pattern in OUTSIDE_REFERENCES:
        found = [
            f"{page_id(page)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for m in pattern.finditer(text)
        ]
        assert not found, f"refers to something outside the repository: {found}"


#: A job's files appearing "at once": no store makes a job's files visible in one request
#: (docs/readers.md); each file appears whole, one after another.
AT_ONCE = re.compile(
    r"\b(files?|jobs?|outputs?)\b[^.|]{0,40}\b(appear\w*|visible)\b[^.|]{0,40}\bat once"
)


@pytest.mark.parametrize(  # the changelog quotes what pages used to say
    "page", [p for p in PAGES if p.name != "CHANGELOG.md"], ids=page_id
)
def test_no_page_says_a_jobs_files_appear_at_once(page):
    found = [
        f"{page_id(page)}:{number}: {line.strip()[:80]}"
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if AT_ONCE.search(line)
    ]
    assert not found, f"a store shows a job's files one by one, not at once: {found}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_relative_links_resolve(page):
    text = FENCE.sub("", page.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{page_id(page)}: link to {target}, which does not exist"


DOCTEST_PAGES = [p for p in PAGES if any(c.startswith(">>>") for _, c in code_blocks(p))]


@pytest.mark.parametrize("page", DOCTEST_PAGES, ids=page_id)
def test_doctest_examples_run(page):
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for line, code in code_blocks(page):
        if code.startswith(">>>"):
            test = parser.get_doctest(code, {}, page_id(page), str(page), line)
            runner.run(test)
    assert runner.tries > 0
    assert runner.failures == 0, f"{runner.failures} doctest examples of {page_id(page)} failed"


#: Runs one page's examples (JSON on stdin: [[file, line, code], ...]) in one namespace.
RUNNER = r"""
import json, os, re, sys, tempfile
blocks = json.load(sys.stdin)
source = "\n".join(code for _, _, code in blocks)
ray_home = None
if re.search(r"\bimport ray\b", source):
    # A local Ray that contacts nothing but 127.0.0.1 (docs/engines/ray.md explains).
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_home = tempfile.mkdtemp(prefix="ray-home-")
    with open(os.path.join(ray_home, "ray_bootstrap_config.yaml"), "w") as config:
        config.write("{}\n")
from magicfs.integrations.embedded_s3 import EmbeddedS3Server

namespace = {"__name__": "__main__"}
with EmbeddedS3Server() as server:
    server.boto3_client().create_bucket(Bucket="bkt")
    namespace["opts"] = dict(server.storage_options)
    spark = None
    if re.search(r"\bspark\b", source):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (
            SparkSession.builder.master("local[2]").appName("magicfs-docs")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        namespace["spark"] = spark
    if ray_home:
        import ray
        home, os.environ["HOME"] = os.environ.get("HOME", ""), ray_home
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        os.environ["HOME"] = home
        import ray.data
        ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        for filename, line, code in blocks:
            print(f"--- {filename}:{line}", flush=True)
            exec(compile("\n" * (line - 1) + code, filename, "exec"), namespace)
    finally:
        if spark is not None:
            spark.stop()
        if ray_home:
            ray.shutdown()
print("--- all examples ran")
"""


def program_blocks(page: pathlib.Path) -> list[tuple[int, str]]:
    return [(line, code) for line, code in code_blocks(page) if not code.startswith(">>>")]


#: Pages whose examples bind ``opts`` themselves and run elsewhere, as pasted.
SELF_CONTAINED = {ROOT / "README.md"}


def example_params():
    for page in PAGES:
        if page in SELF_CONTAINED:
            continue
        blocks = program_blocks(page)
        if not blocks:
            continue
        source = "\n".join(code for _, code in blocks)
        slow = bool(re.search(r"\bspark\b|\bimport ray\b", source))
        yield pytest.param(page, id=page_id(page), marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("page", list(example_params()))
def test_code_examples_run(page):
    blocks = [[page_id(page), line, code] for line, code in program_blocks(page)]
    result = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(blocks),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    ran = re.findall(r"^--- (\S+:\d+)$", result.stdout, flags=re.M)
    assert ran == [f"{name}:{line}" for name, line, _ in blocks]
    assert result.stdout.rstrip().endswith("--- all examples ran")


#: Modules whose docstrings hold the public entry points' examples (rendered in the API
#: reference, so they must run like every other example).
DOCSTRING_MODULES = ["magicfs.integrations.job", "magicfs.committers", "magicfs.protocol.committer"]


def test_docstring_examples_run():
    tried = 0
    for name in DOCSTRING_MODULES:
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, f"{result.failed} docstring examples of {name} failed"
        tried += result.attempted
    assert tried >= 10


@pytest.mark.parametrize(
    "entry_point",
    [magicfs.write_job, magicfs.committer_for],
    ids=lambda f: f.__name__,
)
def test_the_entry_points_explain_themselves(entry_point):
    """``help(magicfs.write_job)`` is enough to use it: parameters, result, errors, example."""
    doc = inspect.getdoc(entry_point)
    for section in ("Args:", "Returns:", "Raises:", "Example:"):
        assert section in doc, f"{entry_point.__name__}: no {section} section"
    for parameter in inspect.signature(entry_point).parameters:
        assert parameter.lstrip("*") in doc, f"{entry_point.__name__}: {parameter} undocumented"


def shell_commands() -> list[tuple[str, str]]:
    """Every ``$ magicfs ...`` line of the pages' transcripts: (page:line, arguments)."""
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            match = re.match(r"\s*\$ magicfs (.*?)\s*(#.*)?$", line)
            if match:
                found.append((f"{page_id(page)}:{number}", match[1]))
    return found


@pytest.mark.parametrize(("where", "arguments"), shell_commands(), ids=lambda v: str(v))
def test_command_line_examples_are_valid_commands(where, arguments):
    """The transcripts' commands are ones the ``magicfs`` command accepts (their output
    comes from tests/test_cli.py's runs against the embedded server)."""
    from magicfs.integrations.cli import build_parser

    try:
        build_parser().parse_args(shlex.split(arguments))
    except SystemExit as e:
        pytest.fail(f"{where}: `magicfs {arguments}` is refused by the command line ({e})")


#: A benchmark command as the pages write it: in a code span (which may wrap) or on a line
#: of a fenced block, ``python benchmarks/NAME.py`` and its arguments.
FENCED_BENCHMARK = re.compile(r"^\s*python benchmarks/(?P<script>[\w-]+)\.py(?P<args>.*)$", re.M)
BENCHMARK_SPAN = re.compile(r"`(?:python )?benchmarks/(?P<script>[\w-]+)\.py(?P<args>[^`]*)`")


def benchmark_commands(page: pathlib.Path) -> list[tuple[str, str, list[str]]]:
    """``(page:line, script, its --options)`` of every benchmark a page names."""
    text = page.read_text()
    found: list[tuple[int, str, str]] = []
    for m in BENCHMARK_SPAN.finditer(text):
        found.append((m.start(), m["script"], m["args"]))
    for block in FENCE.finditer(text):
        for m in FENCED_BENCHMARK.finditer(block["body"]):
            found.append((block.start("body") + m.start(), m["script"], m["args"]))
    commands = [
        (
            f"{page_id(page)}:{text.count(chr(10), 0, at) + 1}",
            script,
            re.findall(r"(?<![\w-])--[a-z][\w-]*", args.split("#", 1)[0]),
        )
        for at, script, args in found
    ]
    for m in re.finditer(r"\bbenchmarks/(?P<script>[\w-]+)\.py", text):
        commands.append(
            (f"{page_id(page)}:{text.count(chr(10), 0, m.start()) + 1}", m["script"], [])
        )
    return commands


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_benchmark_a_page_names_exists_and_takes_its_options(page):
    """A figure's command can be run: its script is in benchmarks/ and accepts each option
    the page gives it (the history appendix's commands only need to exist: they record
    what ran then)."""
    for where, script, options in benchmark_commands(page):
        path = ROOT / "benchmarks" / f"{script}.py"
        assert path.is_file(), f"{where}: benchmarks/{script}.py does not exist"
        if page.name == "benchmarks-history.md":
            continue
        source = path.read_text()
        for option in options:
            assert f'"{option}"' in source, (
                f"{where}: benchmarks/{script}.py has no {option} option"
            )


def tables(text: str) -> list[tuple[int, str, str]]:
    """``(line, text before it, table)`` of each Markdown table, where "before" runs from
    the previous heading or table (whichever is later) to the table's header."""
    found = []
    lines = text.splitlines()
    start = 0
    number = 0
    while number < len(lines):
        if lines[number].startswith("#"):
            start = number
        if lines[number].startswith("|"):
            end = number
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            before = "\n".join(lines[start:number])
            found.append((number + 1, before, "\n".join(lines[number:end])))
            start, number = end, end
            continue
        number += 1
    return found


#: A measured figure in a table cell: a number with a unit of time, size, rate or ratio.
MEASURED = re.compile(r"\d(?:\.\d+)?\s*(?:x|s|ms|MB|MiB|GB|GiB|%|/s)(?![\w-])")
#: What names a figure's source: a benchmark, the demo, or a test module.
SOURCE = re.compile(r"benchmarks/[\w-]+\.py|`magicfs demo|tests/test_\w+\.py")


@pytest.mark.parametrize(  # the history and the changelog record what was measured then
    "page",
    [p for p in PAGES if p.name not in ("benchmarks-history.md", "CHANGELOG.md")],
    ids=page_id,
)
def test_every_table_of_measured_figures_names_where_they_come_from(page):
    """Each table of measured figures says how to reproduce them: a ``command`` column, or
    the script (``python benchmarks/NAME.py ...``, ``magicfs demo`` or a test module) in
    the text between the previous heading or table and the table, or, in a table that
    quotes other pages (the status table), a link in each row that holds a figure. On the
    benchmarks page the command itself is required. Tables of settings (first column
    ``setting``) hold defaults, not measurements."""
    on_benchmarks_page = page == DOCS / "benchmarks.md"
    for line, before, table in tables(page.read_text()):
        rows = table.splitlines()
        header = [cell.strip() for cell in rows[0].strip("|").split("|")]
        figures = [row for row in rows[2:] if MEASURED.search(row)]
        if not figures or header[0] == "setting":
            continue
        where = f"{page_id(page)}:{line}"
        if "command" in header:
            column = header.index("command")
            for row in figures:
                cell = row.strip("|").split("|")[column]
                assert re.search(r"`python benchmarks/|`magicfs |^\s*same\s*$", cell), (
                    f"{where}: a row names no command: {row[:80]}"
                )
        elif on_benchmarks_page:
            assert re.search(r"python benchmarks/[\w-]+\.py", before), (
                f"{where}: this table's figures name no command before it"
            )
        elif not SOURCE.search(before):
            unsourced = [row[:80] for row in figures if "](" not in row]
            assert not unsourced, f"{where}: figures with no script, test or page: {unsourced}"


def test_every_section_of_the_benchmarks_page_with_figures_names_its_command():
    """The benchmarks page's prose figures come with their command too: each section
    that quotes a measured figure names ``python benchmarks/NAME.py`` (the full record's
    sections may not; their figures are historical)."""
    text = (DOCS / "benchmarks.md").read_text()
    sections = re.split(r"^(?=## )", text, flags=re.M)[1:]
    assert len(sections) >= 5
    for section in sections:
        if MEASURED.search(section):
            title = section.splitlines()[0]
            assert re.search(r"python benchmarks/[\w-]+\.py", section), (
                f"docs/benchmarks.md, {title}: figures without the command that prints them"
            )
