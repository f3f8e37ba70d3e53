"""The README is the front door and docs/ the manual: the README stays short and links only to
pages that exist, MkDocs builds the manual strictly (a broken link, an anchor that is gone or
a page missing from the nav fails), and CI runs the README's own test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 250


def nav_pages(nav: list) -> list[str]:
    """Every page file named in an mkdocs nav, nested sections included."""
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    for heading in ("## Two commands", "## From the command line", "## From Python"):
        assert heading in text
    assert "parity dashboard" in text
    assert re.search(r"\*\*0\*\*.*\*\*1\*\*.*\*\*2\*\*", text, re.S), "the exit codes"


def test_the_readme_links_to_files_that_exist():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert any(t.startswith("docs/") and t.endswith(".md") for t in local)
    assert "docs/img/dashboard.png" in local
    assert [t for t in local if not (ROOT / t).exists()] == []


def test_every_docs_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav_pages(config["nav"])) == on_disk


def test_mkdocs_builds_the_docs_strictly(tmp_path: Path):
    done = subprocess.run(
        # not -q: it hides the warnings from --strict as well, which then passes anything
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "layout" / "index.html").is_file()
    assert (tmp_path / "site" / "img" / "dashboard.png").is_file()


def test_ci_runs_the_readme_test_command_verbatim():
    """.ci/run installs once with the README's own command, runs the suite (which builds the
    docs strictly, once: test_mkdocs_builds_the_docs_strictly), then lints on that install."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    install = "pip install torch==2.13.0 -e '.[dev,hf,ray]' && python -m pytest"
    assert install in readme
    lines = [line.split("#")[0].strip() for line in ci.splitlines()]
    assert install in lines
    assert sum("pip install" in line for line in lines) == 1, "one install"
    assert not any("mkdocs build" in line for line in lines), "the suite builds the docs"
    for check in ("ruff check .", "ruff format --check .", "mypy"):
        assert check in lines, f"{check} runs in .ci/run"
