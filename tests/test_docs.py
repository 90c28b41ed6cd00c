"""The reference in docs/ builds with Sphinx (MyST Markdown, the PyData theme), warnings as errors: a link to a
page or heading that is not there, a page outside every toctree, an image or included file that is missing each
fail the build, and so the suite; the README links into it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def build(source: Path, out: Path) -> subprocess.CompletedProcess:
    """sphinx-build with warnings as errors, every warning reported (--keep-going), into `out`."""
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           "-d", str(out / ".doctrees"), str(source), str(out)],
                          check=False, capture_output=True, text=True, timeout=240)


def test_the_docs_build_without_a_warning(tmp_path):
    built = build(DOCS, tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    pages = {path.stem for path in DOCS.glob("*.md")}
    assert pages == {path.stem for path in tmp_path.glob("*.html")} - {"genindex", "search"}


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> str:
    """The output of a build of a copy of docs/ with a link to a page that does not exist, a link to a heading that
    does not exist and a page no toctree names. Beside the copy, the repository's other top-level entries, linked,
    so that the pages' ../ paths (the OpenAPI document, the screenshots) resolve as in the checkout."""
    tree = tmp_path_factory.mktemp("tree")
    for entry in REPO.iterdir():
        if entry.name not in ("docs", ".git"):
            (tree / entry.name).symlink_to(entry)
    docs = tree / "docs"
    shutil.copytree(DOCS, docs, ignore=shutil.ignore_patterns("_build"))
    with (docs / "cli.md").open("a") as page:
        page.write("\nSee [the missing page](no-such-page.md) and [a missing heading](job-spec.md#no-such-heading).\n")
    (docs / "stray.md").write_text("# A page no toctree names\n")
    built = build(docs, tree / "out")
    assert built.returncode != 0, "the build passed with broken links and a stray page"
    return built.stdout + built.stderr


def test_a_link_to_a_missing_page_or_heading_fails_the_build(broken):
    assert re.search(r"cli\.md:\d+: WARNING: .*no-such-page\.md", broken), broken
    assert re.search(r"cli\.md:\d+: WARNING: .*no-such-heading", broken), broken


def test_a_page_outside_every_toctree_fails_the_build(broken):
    assert re.search(r"stray\.md: WARNING: document isn't included in any toctree", broken), broken


def test_the_readme_links_every_page_and_only_files_that_exist():
    """The README is the front door: its relative links (images too) lead to files of the checkout, one to each
    page of docs/."""
    readme = (REPO / "README.md").read_text()
    targets = {target.partition("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", readme)
               if "://" not in target}
    assert [target for target in sorted(targets) if not (REPO / target).is_file()] == []
    pages = {f"docs/{path.name}" for path in DOCS.glob("*.md")}
    assert sorted(pages - targets) == []
