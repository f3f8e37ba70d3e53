"""The floors hold: the import-linter contracts of pyproject.toml (the floors, the few imports
allowed back up, no Streamlit in core), no import cycle, and importing `parity.results` and
`parity.run.config` loads neither `parity.layers` nor `parity.hf` (the layers' type is
registered by name when parity.layers.result loads, and an annotation only here, under
TYPE_CHECKING; an hf: run's options are the run's own,
parity.run.hf_options), both still working with the values those packages give."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE = """
import sys
import tomllib
import parity.results, parity.run.config
above = sorted(m for m in sys.modules if m.startswith(("parity.layers", "parity.hf")))
print("loaded above:", above)
from parity.run.hf_options import HfOptions
from parity.layers.result import LayersResult
from parity.run.config import RunConfig
import typing
hints = typing.get_type_hints(RunConfig, {**vars(parity.run.config), "HfOptions": HfOptions})
assert "hf" in hints
def hints_of(cls):  # each type read in its own module's names (parity.results is a package)
    names = {**vars(sys.modules[cls.__module__]), "LayersResult": LayersResult}
    return typing.get_type_hints(cls, names)
from parity.results.by_name import result_types
assert result_types()["layers"] is LayersResult  # a candidate holds its layers by that name
layers_hint = typing.get_type_hints(parity.results.CandidateRun.layers.fget, {
    **vars(sys.modules[parity.results.CandidateRun.__module__]), "LayersResult": LayersResult,
})["return"]
assert layers_hint == LayersResult | None, layers_hint
assert "candidates" in hints_of(parity.results.ValidationRun)
"""


def test_results_and_run_config_load_nothing_above_them() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "loaded above: []" in out.stdout, out.stdout


# --- floors -------------------------------------------------------------------------------
# The floors and the forbidden imports are import-linter contracts ([tool.importlinter] in
# pyproject.toml); `lint-imports` checks them (.ci/run runs it too).


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "importlinter"
    ]["contracts"]


def test_the_import_contracts_hold() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command as c; c()",
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in out.stdout, out.stdout


def test_at_most_three_imports_run_back_up_each_for_its_reason() -> None:
    """An allowed upward import is an `ignore_imports` line of the layers contract, with the
    comment above it that says why; type-only imports count (their annotations need them)."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    allowed = layers.get("ignore_imports", [])
    assert len(allowed) <= 3, allowed
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    for line in allowed:
        (i,) = [n for n, row in enumerate(text) if row.strip() == f'"{line}",']
        assert text[i - 1].strip().startswith("# "), f"{line}: no reason above it"


def test_no_import_cycle() -> None:
    """No module reaches itself through imports, lazy and type-only ones included."""
    import grimp

    graph = grimp.build_graph("parity", cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:  # Tarjan: strongly connected components of the import graph
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in sorted(graph.find_modules_directly_imported_by(m)):
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            component = [stack.pop()]
            while component[-1] != m:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    assert cycles == [], cycles
