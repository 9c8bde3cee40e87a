"""Every test the README's "Guarantees" section names exists, so the table cannot point at nothing.

A row names `file.py::test_name`, a bare `test_name` (in the file the row or an earlier row
named), or a whole `file.py`. A renamed or deleted test fails here, not in an audit.
"""

from __future__ import annotations

import re

from conftest import REPO

_SECTION = re.compile(r"^## Guarantees\n(.*?)^## ", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`([^`]+)`")


def _test_files() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in (REPO / "tests").rglob("test_*.py")}


def test_every_test_the_guarantees_name_exists() -> None:
    section = _SECTION.search((REPO / "README.md").read_text(encoding="utf-8"))
    assert section is not None, "README.md has no '## Guarantees' section"
    files = _test_files()
    named, missing = 0, []
    current: str | None = None
    for row in (line for line in section.group(1).splitlines() if line.startswith("|")):
        for code in _CODE.findall(row.rsplit("|", 2)[-2]):  # the last column names the tests
            for ref in re.findall(r"[\w/]*test_\w+(?:\.py)?(?:::\w+)?", code):
                file, _, name = ref.partition("::")
                if file.endswith(".py"):
                    current = file.rsplit("/", 1)[-1]
                    if current not in files:
                        missing.append(ref)
                        continue
                else:
                    name = file
                if not name:
                    named += 1
                    continue
                name = name.split("[", 1)[0]
                where = [current] if current in files else list(files)
                if not any(re.search(rf"^(?:async )?def {re.escape(name)}\(", files[f], re.MULTILINE) for f in where):
                    missing.append(f"{current}::{name}")
                named += 1
    assert named >= 30, f"only {named} tests named: is the table still parsed?"
    assert not missing, f"README Guarantees name tests that do not exist: {missing}"
