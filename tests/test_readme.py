"""The README tells the truth: CI runs the README's test command, and its examples run."""

from __future__ import annotations

import doctest
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert "pytest" in ci
    assert f"```bash\n{ci}\n```" in (ROOT / "README.md").read_text()


def test_readme_python_examples_run():
    text = (ROOT / "README.md").read_text()
    examples = "\n".join(re.findall(r"```python\n(>>>.*?)```", text, flags=re.S))
    parser = doctest.DocTestParser()
    test = parser.get_doctest(examples, {}, "README", "README.md", 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.failures == 0 and runner.tries > 0
