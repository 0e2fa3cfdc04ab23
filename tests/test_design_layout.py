"""docs/design.md owns the layout, and the docs name only files that exist.

The layout table is generated from the modules' docstrings (`python -m scripts.docs_layout`), so
a module added, moved or removed without regenerating it fails here; and every repository path the
README and docs/ write in backticks must exist, so a moved file cannot leave a stale reference.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts import docs_layout

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
# Top-level folders whose paths the documents name; a path under them must exist.
TREES = [
    *("benchmarks", "docs", "evalfleet", "examples", "inference_server", "manifests", "protos"),
    *("renderer_worker", "requirements", "scheduler", "scripts", "tests"),
]
PATH = re.compile(r"`((?:" + "|".join(TREES) + r")/[\w./-]*)`")


def test_the_layout_in_design_md_is_the_one_the_code_gives() -> None:
    text = docs_layout.DESIGN.read_text(encoding="utf-8")
    assert text == docs_layout.rewritten(text), "docs/design.md's layout is stale: run `python -m scripts.docs_layout`"


def test_every_module_has_a_line_in_the_layout() -> None:
    text = docs_layout.DESIGN.read_text(encoding="utf-8")
    for package in docs_layout.PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            relative = path.relative_to(REPO).as_posix()
            if not relative.startswith("evalfleet/v1/"):
                assert f"| `{relative}` |" in text, f"{relative} has no line in docs/design.md's layout"


def test_a_module_without_a_docstring_is_refused_by_name(tmp_path: Path) -> None:
    module = tmp_path / "undocumented.py"
    module.write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(docs_layout.LayoutError, match="undocumented.py has no module docstring"):
        docs_layout.summary(module, root=tmp_path)


def test_the_documents_name_only_files_that_exist() -> None:
    missing = [
        f"{document.relative_to(REPO)}: {path}"
        for document in DOCUMENTS
        for path in PATH.findall(document.read_text(encoding="utf-8"))
        if not (REPO / path.rstrip("/")).exists()
    ]
    assert not missing, "documents name paths that do not exist:\n" + "\n".join(missing)
