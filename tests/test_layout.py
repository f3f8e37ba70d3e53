"""The repository's layout, held to the tree: the layout page (docs/layout.md) lists every
module of core/ (the package `parity`) and pages/ (`parity.dashboard`) and nothing that is gone,
and pyproject.toml's explicit `packages` are exactly the package folders."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"parity": ROOT / "core", "parity.dashboard": ROOT / "pages"}
LAYOUT_PAGE = ROOT / "docs" / "layout.md"
ENTRY_INDENT = 8
"""A layout line indented by at most this many spaces names a module or a folder."""


def layout_block(page: str) -> str:
    """The layout page's first fenced block (the tree)."""
    found = re.search(r"^```\n(.*?)^```", page, re.S | re.M)
    assert found, "no fenced block on the layout page"
    return found.group(1)


def listed(block: str) -> dict[str, tuple[set[str], set[str]]]:
    """{folder: (modules, subfolders)} as the layout block lists them, folders as paths
    ("core/judge/"). A folder's modules are its module lines and the `NAME.py` words of its
    own description."""
    entries: list[tuple[str | None, str, str]] = []  # (parent folder, name, description)
    stack: list[tuple[int, str]] = []  # (indent, path) of the folders open at this line
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent > ENTRY_INDENT:  # the description above, continued
            assert entries, f"a description before any entry: {line!r}"
            parent, name, text = entries[-1]
            entries[-1] = (parent, name, f"{text} {line.strip()}")
            continue
        name, _, text = line.strip().partition(" ")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else None
        entries.append((parent, name, text))
        if name.endswith("/"):
            stack.append((indent, (parent or "") + name))
    folders: dict[str, tuple[set[str], set[str]]] = {}
    for parent, name, text in entries:
        if name.endswith("/"):
            folders[(parent or "") + name] = (set(re.findall(r"\b(\w+\.py)\b", text)), set())
    for parent, name, _ in entries:
        if parent is not None:
            modules, subfolders = folders[parent]
            (subfolders if name.endswith("/") else modules).add(name)
    return folders


def on_disk(top: Path) -> dict[str, tuple[set[str], set[str]]]:
    """{folder: (modules, subfolders)} of a package folder, recursively; __init__.py is the
    folder's own line."""
    folders = {}
    for folder in [top, *sorted(d for d in top.rglob("*") if d.is_dir())]:
        if folder.name == "__pycache__" or "__pycache__" in folder.parts:
            continue
        modules = {p.name for p in folder.glob("*.py")} - {"__init__.py"}
        subfolders = {d.name + "/" for d in folder.iterdir() if (d / "__init__.py").is_file()}
        folders[folder.relative_to(ROOT).as_posix() + "/"] = (modules, subfolders)
    return folders


def test_the_layout_page_lists_every_module_of_core_and_pages():
    shown = listed(layout_block(LAYOUT_PAGE.read_text(encoding="utf-8")))
    problems = []
    for top in PACKAGES.values():
        for folder, (modules, subfolders) in on_disk(top).items():
            got_modules, got_subfolders = shown.get(folder, (set(), set()))
            for what, want, got in (("module", modules, got_modules),
                                    ("folder", subfolders, got_subfolders)):  # fmt: skip
                problems += [f"{folder}{n}: not in docs/layout.md ({what})"
                             for n in sorted(want - got)]  # fmt: skip
                problems += [f"{folder}{n}: in docs/layout.md, not in the tree ({what})"
                             for n in sorted(got - want)]  # fmt: skip
    for folder in sorted(shown):
        if folder.startswith(("core/", "pages/")) and not (ROOT / folder).is_dir():
            problems.append(f"{folder}: in docs/layout.md, not in the tree (folder)")
    assert problems == []


def test_the_layout_parser_reads_module_lines_and_folder_descriptions():
    block = (
        "core/      the package\n"
        "  api.py   the API\n"
        "  hf/      models: a.py, b.py (the b)\n"
        "           and c.py\n"
        "  sub/     its modules below\n"
        "    x.py   the x, see y.py\n"
        "pages/     the dashboard\n"
        "  run.py   Run page\n"
    )
    assert listed(block) == {
        "core/": ({"api.py"}, {"hf/", "sub/"}),
        "core/hf/": ({"a.py", "b.py", "c.py"}, set()),
        "core/sub/": ({"x.py"}, set()),
        "pages/": ({"run.py"}, set()),
    }


def test_pyproject_packages_are_exactly_the_package_folders():
    """Packages are listed, not discovered (discovery with package-dir breaks editable
    installs): a new subpackage missing here would be left out of the wheel."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {k: v.name for k, v in PACKAGES.items()}
    expected = []
    for package, top in PACKAGES.items():
        for init in sorted(top.rglob("__init__.py")):
            parts = init.parent.relative_to(top).parts
            expected.append(".".join((package, *parts)))
        stray = [p for p in top.rglob("*.py") if not (p.parent / "__init__.py").is_file()]
        assert stray == [], f"modules in a folder that is no package: {stray}"
    assert sorted(setuptools["packages"]) == sorted(expected)


def test_the_type_checkers_package_links_every_entry_of_core_and_the_dashboard():
    """mypy checks the package `parity` as .ci/parity (docs/development.md, Types): one link
    per entry of core/ and `dashboard` to pages/. A module of core/ without its link would go
    unchecked, and every import of it would read as Any."""
    farm = ROOT / ".ci" / "parity"
    links = {p.name: p for p in farm.iterdir()}
    assert all(p.is_symlink() for p in links.values()), sorted(links)
    assert {n: p.resolve() for n, p in links.items()} == {
        **{p.name: p.resolve() for p in PACKAGES["parity"].iterdir() if p.name != "__pycache__"},
        "dashboard": PACKAGES["parity.dashboard"].resolve(),
    }
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["files"] == [".ci/parity"]
