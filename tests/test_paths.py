"""The magic path grammar: Hadoop's TestMagicCommitPaths vectors plus property tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magicfs.paths import (
    final_destination,
    final_destination_elements,
    is_magic_element,
    is_magic_path,
    last_element,
    magic_children,
    magic_parents,
    marked_destinations,
    parse_magic_path,
    split_path_elements,
)

M = "__magic_job-"  # Hadoop's MAGIC_PATH_PREFIX element, as its tests use it


# --- TestMagicCommitPaths, vector by vector -------------------------------------------


def test_split_empty_path_throws():
    with pytest.raises(ValueError):
        split_path_elements("")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("//", []),
        ("/", []),
        ("/a/b/c", ["a", "b", "c"]),
        ("/a/b/c/", ["a", "b", "c"]),
        ("/a", ["a"]),
        ("/a/", ["a"]),
    ],
)
def test_split(path, expected):
    assert split_path_elements(path) == expected


@pytest.mark.parametrize(
    ("elements", "parents", "children"),
    [
        ([M], [], []),
        ([M, "child"], [], ["child"]),
        (["parent", M, "child"], ["parent"], ["child"]),
        (["parent", M], ["parent"], []),
        (["p1", "p2", M, "c1", "c2"], ["p1", "p2"], ["c1", "c2"]),
    ],
)
def test_parents_and_children(elements, parents, children):
    assert magic_parents(elements) == parents
    assert magic_children(elements) == children


def test_last_element():
    with pytest.raises(ValueError):
        last_element([])
    assert last_element(["first"]) == "first"
    assert last_element(["first", "2"]) == "2"


@pytest.mark.parametrize(
    ("elements", "expected"),
    [
        (["first", "2"], ["first", "2"]),
        (["first", M, "2"], ["first", "2"]),
        (["first", M, "2", "3.txt"], ["first", "3.txt"]),
        ([M, "2", "3.txt"], ["3.txt"]),
        ([M, "__base", "3.txt"], ["3.txt"]),
        ([M, "4", "__base", "2", "3.txt"], ["2", "3.txt"]),
        (["__base", "home", M, "2", "3.txt"], ["__base", "home", "3.txt"]),
    ],
)
def test_final_destination_elements(elements, expected):
    assert final_destination_elements(elements) == expected


@pytest.mark.parametrize("elements", [[M], [M, "__base"]])
def test_final_destination_elements_without_a_file_throw(elements):
    with pytest.raises(ValueError):
        final_destination_elements(elements)


# --- ITestCommitOperations path cases and the API.md strings -----------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("s3://bkt/dir/__magic_job-123/__base/f", "s3://bkt/dir/f"),
        (
            "s3://bkt/dir/__magic_job-123/child/__base/subdir/child.txt",
            "s3://bkt/dir/subdir/child.txt",
        ),
        (
            "s3://bkt/out/__magic_job-7/job-7/00/tasks/attempt_1/__base/year=2024/p.parquet",
            "s3://bkt/out/year=2024/p.parquet",
        ),
        ("bkt/out/__magic/job-7/task_01/p.parquet", "bkt/out/p.parquet"),
        ("/tmp/out/__magic/t/__base/a b/ü.csv", "/tmp/out/a b/ü.csv"),
        ("s3://bkt/plain/file.csv", "s3://bkt/plain/file.csv"),
    ],
)
def test_final_destination_of_paths(path, expected):
    assert final_destination(path) == expected


@pytest.mark.parametrize("path", ["a/__magic", "a/__magic/__base", "s3://b/x/__magic_job-1/"])
def test_paths_naming_no_file_are_rejected(path):
    with pytest.raises(ValueError, match=r"magic|__base"):
        final_destination(path)


def test_both_spellings_of_the_magic_element_are_magic():
    assert is_magic_path("s3://b/out/__magic/x")
    assert is_magic_path("s3://b/out/__magic_job-42/x")
    assert not is_magic_path("s3://b/out/__magical/x")
    assert not is_magic_path("s3://b/out/__base/x")
    assert not is_magic_path("s3://b/out/x__magic/y")


def test_job_and_attempt_ids_are_read_from_the_layout():
    new = parse_magic_path("s3://b/out/__magic_job-42/job-42/00/tasks/attempt_7/__base/f")
    assert (new.job_id, new.task_attempt_id) == ("42", "attempt_7")
    legacy = parse_magic_path("b/out/__magic/job-9/01/tasks/attempt_3/__base/f")
    assert (legacy.job_id, legacy.task_attempt_id) == ("9", "attempt_3")
    assert parse_magic_path("b/out/__magic/loose.csv").job_id is None
    assert parse_magic_path("b/out/file.csv") is None


@pytest.mark.parametrize(
    "path",
    [
        "s3://b/out/__magic/../x",
        "s3://b/out/../__magic/t/x",
        "s3://b/out/__magic/t/__base/../../escape",
        "s3://b/out//__magic/t/x",
        "s3://b/out/__magic/t//x",
        "s3://b/out/__magic/./x",
    ],
)
def test_dot_dot_and_empty_elements_are_rejected(path):
    with pytest.raises(ValueError, match="forbidden element"):
        final_destination(path)


def test_a_destination_that_is_itself_magic_is_rejected():
    with pytest.raises(ValueError, match="itself be a magic path"):
        final_destination("s3://b/out/__magic/__base/__magic_job-2/f")


# --- properties ---------------------------------------------------------------------------

# Path elements: any text without "/" (whitespace and unicode included), not "", "." or "..".
element = st.text(
    alphabet=st.characters(blacklist_characters="/", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
).filter(lambda e: e not in (".", ".."))
plain = element.filter(lambda e: not is_magic_element(e) and e != "__base")
magic = st.sampled_from(["__magic", "__magic_job-1", "__magic_job-abc def", "__magic_job-"])


@given(
    parents=st.lists(plain, max_size=4),
    magic_element=magic,
    middle=st.lists(element, max_size=4),
    use_base=st.booleans(),
    below=st.lists(element, min_size=1, max_size=4),
    root=st.sampled_from(["", "/", "s3://", "memory://"]),
)
def test_final_destination_properties(parents, magic_element, middle, use_base, below, root):
    children = [*middle, "__base", *below] if use_base else [*middle, *below]
    path = root + "/".join([*parents, magic_element, *children])
    try:
        destination = final_destination(path)
    except ValueError:
        # Only a destination that would itself be magic may be refused here.
        assert any(is_magic_element(e) for e in children)
        return
    dest_elements = destination[len(root) :].split("/")
    # never contains a magic element
    assert not any(is_magic_element(e) for e in dest_elements)
    # never escapes the part before the magic element
    assert dest_elements[: len(parents)] == parents
    assert len(dest_elements) > len(parents)
    # names come through byte for byte (whitespace, unicode: HADOOP-17112)
    expected_tail = (
        children[children.index("__base") + 1 :] if "__base" in children else children[-1:]
    )
    assert dest_elements[len(parents) :] == expected_tail
    assert destination.startswith(root)


@given(
    parents=st.lists(plain, min_size=1, max_size=3),
    children=st.lists(element, min_size=1, max_size=3),
    bad=st.sampled_from(["..", ".", ""]),
    position=st.integers(min_value=1, max_value=10),
)
def test_dot_dot_and_empty_elements_are_always_rejected(parents, children, bad, position):
    # (position 0 would make "" a leading "/", i.e. an absolute path, which is fine)
    elements = [*parents, "__magic", *children]
    elements.insert(min(position, len(elements)), bad)
    path = "s3://" + "/".join(elements) + "/leaf"
    with pytest.raises(ValueError):
        final_destination(path)


def test_marked_destinations_are_the_files_markers_and_pending_records_name():
    tree = "bkt/out/__magic_job-j1"
    attempt = f"{tree}/tasks/attempt_j1_0000_m_000000_0"
    listing = [
        f"{attempt}/__base/a.csv",  # a marker
        f"{attempt}/__base/p=1/b.csv.pending",  # a record
        f"{attempt}/__base/p=1/b.csv",  # its marker: the same destination
        f"{attempt}.pendingset",  # names no file
        f"{tree}/__magic",  # a magic path that names no file
        "bkt/out/plain.csv",  # not in a magic tree
    ]
    assert marked_destinations(listing) == {"bkt/out/a.csv", "bkt/out/p=1/b.csv"}
