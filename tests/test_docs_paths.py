"""Every path ARCHITECTURE.md and README.md name exists: docs that point at moved files mislead
the newcomer they are written for."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("ARCHITECTURE.md", "README.md", "docs/reference.md")
TOP = ("dpviz/", "tests/", "notebooks/", "animations/", "scripts/", "benchmarks/", "book/", ".ci/")
# a path in backticks: starts at a top-level folder of the repository; `<subject>`, `<name>`,
# `NN_…` stand for any one name (a glob), and a file name before ` (` or `:` ends it
CODE = re.compile(r"`([^`\s]+)`")


def named_paths(text: str) -> list[str]:
    """The repository paths a document names in backticks, placeholders as globs."""
    found = []
    for token in CODE.findall(text):
        token = token.split(":")[0].rstrip(".,")
        if not token.startswith(TOP):
            continue
        found.append(re.sub(r"<[^>]+>|NN_[^/]*|\{[^}]*\}", "*", token))
    return found


def test_the_reader_finds_paths_and_placeholders():
    text = "see `dpviz/core/link.py`, `dpviz/lessons/<subject>/plots.py`, `tests/` and `dpviz.run`"
    assert named_paths(text) == ["dpviz/core/link.py", "dpviz/lessons/*/plots.py", "tests/"]


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_a_doc_names_exists(doc):
    missing = [p for p in named_paths((ROOT / doc).read_text()) if not list(ROOT.glob(p.rstrip("/")))]
    assert missing == [], f"{doc} names paths that do not exist"
