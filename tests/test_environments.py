"""The environments magicfs claims are the ones CI runs: Python versions, dependency
ranges at both ends, and tox running what ``.ci/run`` runs.

The runs themselves need the network (fresh venvs from the package index), so they are
``tests/environments.sh``, which ``.ci/run`` runs after the suite; these tests keep the
metadata, the lowest run's constraints and tox's environments in step with it.
"""

from __future__ import annotations

import configparser
import pathlib
import re
import tomllib

from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TOX = configparser.ConfigParser(interpolation=None)
TOX.read(ROOT / "tox.ini")
#: The extras the lowest run installs (tests/environments.sh: ``.[test-core]``).
LOWEST_EXTRAS = ("demo", "test-core")
#: Pinned in the lowest run though not a requirement of magicfs: moto's boto3, at the
#: release of the lowest aiobotocore's botocore (else pip tries every newer boto3 first).
NOT_REQUIRED = {"boto3"}


def requirements(*extras: str) -> list[Requirement]:
    """The project's requirements and those of ``extras``, without its own extras."""
    listed = list(PROJECT["dependencies"])
    for extra in extras:
        listed += PROJECT["optional-dependencies"][extra]
    return [r for r in map(Requirement, listed) if r.name != "magicfs"]


def lowest_constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "lowest.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def test_the_lowest_run_pins_each_requirement_at_its_lower_bound():
    expected = {}
    for requirement in requirements(*LOWEST_EXTRAS):
        (bound,) = [s.version for s in requirement.specifier if s.operator == ">="]
        expected[requirement.name.lower()] = bound
    pins = lowest_constraints()
    # The same releases; pip's constraints need every part (2.19 is 2.19.0).
    assert set(pins) - NOT_REQUIRED == set(expected)
    for name, bound in expected.items():
        assert Requirement(f"{name}=={pins[name]}").specifier.contains(bound), name


def test_no_requirement_has_an_upper_bound():
    """No test justifies one: the lowest run and the newest run are what is tested."""
    for extra in PROJECT["optional-dependencies"]:
        for requirement in requirements(extra):
            operators = {s.operator for s in requirement.specifier}
            assert operators <= {">=", "!="}, f"{extra}: {requirement}"


def test_the_python_versions_claimed_are_the_ones_tox_and_ci_run():
    classifiers = {
        c.rsplit(" :: ", 1)[1]
        for c in PROJECT["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert classifiers == {"3.11", "3.12", "3.13"}
    assert PROJECT["requires-python"] == ">=3.11"
    envs = [e.strip() for e in TOX["tox"]["envlist"].split(",")]
    assert {f"py{v.replace('.', '')}" for v in classifiers} <= set(envs)
    # CI's two lean runs: the newest Python claimed, the lowest versions on the oldest.
    script = (ROOT / "tests" / "environments.sh").read_text()
    assert f"MAGICFS_NEWEST_PYTHON:-python{max(classifiers, key=lambda v: int(v[2:]))}" in script
    assert f"MAGICFS_LOWEST_PYTHON:-python{min(classifiers, key=lambda v: int(v[2:]))}" in script
    assert TOX["testenv:lowest"]["basepython"] == "python3.11"
    assert "-c {toxinidir}/.ci/lowest.txt" in TOX["testenv:lowest"]["install_command"]


def test_tox_runs_the_servers_ci_runs():
    """tox's suite installs the servers .ci/run installs and fails, as CI does, where one
    cannot start (CI=true), rather than skipping its tests and passing."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash tests/install_servers.sh" in ci and "export CI=true" in ci
    testenv = TOX["testenv"]
    assert testenv["commands_pre"].strip() == "bash tests/install_servers.sh"
    assert "CI = true" in testenv["setenv"]
    assert "-n 2 --dist loadfile" in testenv["commands"]
