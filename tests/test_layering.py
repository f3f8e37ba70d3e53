"""The root vocabulary stands below the packages built on it: importing `parity.results` and
`parity.run.config` loads neither `parity.layers` nor `parity.hf` (their types are annotations
only, imported under TYPE_CHECKING), and both still work with the values those packages give."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CODE = """
import sys
import parity.results, parity.run.config
above = sorted(m for m in sys.modules if m.startswith(("parity.layers", "parity.hf")))
print("loaded above:", above)
from parity.hf.options import HfOptions
from parity.layers.result import LayersResult
from parity.run.config import RunConfig
import typing
hints = typing.get_type_hints(RunConfig, {**vars(parity.run.config), "HfOptions": HfOptions})
assert "hf" in hints
hints = typing.get_type_hints(
    parity.results.CandidateRun, {**vars(parity.results), "LayersResult": LayersResult}
)
assert "layers" in hints  # a candidate's record holds its layers
hints = typing.get_type_hints(
    parity.results.ValidationRun, {**vars(parity.results), "LayersResult": LayersResult}
)
assert "candidates" in hints
"""


def test_results_and_run_config_load_nothing_above_them() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "loaded above: []" in out.stdout, out.stdout


# --- floors -------------------------------------------------------------------------------
# The house from the ground up: a module may import its own floor and those below. An import
# that runs back up is allowed only where listed (at most five), each for a reason; imports
# under TYPE_CHECKING (annotations) do not count.
FLOORS = (
    {"settings", "errors", "version", "verdict", "text", "messages", "path_flags"},
    {"limits"},  # the memory budget and the deadline: files/, load/ and results draw on them
    {"files"},
    {"tolerances"},
    {"signature"},
    {"load"},
    {"results", "labels"},
    {"judge"},
    {"run"},
    {"sources"},
    {"show"},
    {"layers"},
    {"hf"},
    {"analyses"},  # the optional stages, run by the pipeline
    {"pipeline"},
    {"reports"},
    {"sweep"},
    {"api", "launch", "cli", "__main__", "__init__"},
)
ALLOWED_UP = {
    # hf's own flags are rows of the one flag table
    ("parity.hf.cli_args", "parity.cli.definition"),
    # the profile a comparison keeps is a judge type the run carries
    ("parity.results", "parity.judge.error_profile"),
    # an opened run's hf: settings (imported when a run has them)
    ("parity.run.config_json", "parity.hf.options"),
    # the generation's finding words are the hf report's
    ("parity.show.findings", "parity.hf.generation_report"),
}


def _floor(module: str) -> int:
    name = module.split(".")[1] if "." in module else "__init__"
    return next(i for i, names in enumerate(FLOORS) if name in names)


def _upward_imports() -> list[tuple[str, str, str]]:
    import ast

    found = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        parts = path.relative_to(ROOT / "core").with_suffix("").parts
        module = ".".join(("parity", *parts)).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            n.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
            if hasattr(n, "lineno")
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if not name.startswith("parity") or node.lineno in typing_only:
                    continue
                if _floor(name) > _floor(module):
                    found.append((module, name, f"{path.name}:{node.lineno}"))
    return found


def test_at_most_five_imports_run_back_up_the_floors() -> None:
    up = _upward_imports()
    unexpected = [u for u in up if (u[0], u[1]) not in ALLOWED_UP]
    assert unexpected == [], unexpected
    assert len(ALLOWED_UP) <= 5


def test_no_import_cycle_and_no_streamlit_in_core() -> None:
    tool = ROOT.parent / "shared" / "tools" / "layering.py"
    if not tool.is_file():
        pytest.skip("the shared layering tool is not beside this checkout")
    out = subprocess.run(
        [sys.executable, str(tool), "core"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stdout
