"""The Python blocks of docs/PYTHON.md (in order, in one namespace) and of
the README run: what the pages show works."""

import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def blocks(path):
    with open(path) as f:
        return re.findall(r"^```python\n(.*?)^```$", f.read(), re.S | re.M)


def test_python_md_examples_run():
    code = blocks(os.path.join(ROOT, "docs", "PYTHON.md"))
    assert len(code) >= 3, "no python blocks found: the test checks nothing"
    ns = {}
    for i, c in enumerate(code):
        exec(compile(c, f"docs/PYTHON.md block {i + 1}", "exec"), ns)  # noqa: S102 (the repository's own docs)
    assert ns["sender"].closed and ns["receiver"].closed


def test_readme_examples_run(capsys):
    code = blocks(os.path.join(ROOT, "README.md"))
    assert code, "no python blocks in the README: the test checks nothing"
    for i, c in enumerate(code):
        exec(compile(c, f"README.md block {i + 1}", "exec"), {})  # noqa: S102 (the repository's own docs)
    assert capsys.readouterr().out == "True 24 6.0\n"
