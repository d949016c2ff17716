"""The documentation site's configuration: every page under docs/ is in mkdocs.yml's nav (a new page cannot
be forgotten), every nav entry is a page, and ``make test`` builds the site with warnings as errors. The
build itself is ``make docs`` (a prerequisite of ``make test``), not run here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def load_mkdocs_config() -> dict[str, Any]:
    """mkdocs.yml as plain data; its ``!!python/...`` tags (a slugify function) load as None."""
    yaml = pytest.importorskip("yaml")

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)
    assert isinstance(config, dict)
    return config


def nav_pages(entry: Any) -> list[str]:
    """Every page path of a nav entry (a path, a ``{title: entry}`` mapping or a list of entries)."""
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, dict):
        return [page for value in entry.values() for page in nav_pages(value)]
    if isinstance(entry, list):
        return [page for item in entry for page in nav_pages(item)]
    raise TypeError(f"unexpected nav entry {entry!r}")


def test_nav_pages_reads_paths_titles_and_sections() -> None:
    assert nav_pages(["a.md", {"Section": ["b.md", {"Title": "c/d.md"}]}]) == ["a.md", "b.md", "c/d.md"]


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = load_mkdocs_config()
    assert config.get("docs_dir", "docs") == "docs"
    nav = nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert sorted(pages - set(nav)) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(set(nav) - pages) == [], "nav entries without a page"


def test_the_nav_has_the_documented_groups() -> None:
    groups = [next(iter(entry)) for entry in load_mkdocs_config()["nav"] if isinstance(entry, dict)]
    assert groups == [
        "Getting started", "Accounting", "Training", "Deployment", "Auditing", "Reproductions", "Reference",
    ]  # fmt: skip


def test_make_test_builds_the_docs_strictly_and_offline() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    test_target = re.search(r"^test:(.*)$", makefile, re.MULTILINE)
    assert test_target and "docs" in test_target.group(1).split()
    docs_recipe = re.search(r"^docs:.*\n\t(.*)$", makefile, re.MULTILINE)
    assert docs_recipe and "mkdocs build --strict" in docs_recipe.group(1)
    assert "--quiet" not in docs_recipe.group(1)  # --quiet hides the warnings --strict counts
    plugins = load_mkdocs_config().get("plugins", [])
    names = {next(iter(p)) if isinstance(p, dict) else p for p in plugins}
    assert not names & {"privacy", "social", "material/privacy", "material/social"}  # they fetch from the web


def test_the_readme_keeps_the_two_commands_and_points_to_the_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for command in ("make demo", "make test"):  # each with its description
        assert re.search(rf"^{command} +# \S", readme, re.MULTILINE), command
    assert "make docs" in readme and "site/index.html" in readme
