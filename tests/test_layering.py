"""The root vocabulary stands below the packages built on it: importing `parity.results` and
`parity.run.config` loads neither `parity.layers` nor `parity.hf` (their types are annotations
only, imported under TYPE_CHECKING), and both still work with the values those packages give."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
