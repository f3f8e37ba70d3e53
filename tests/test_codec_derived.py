"""The codec derived from the types (parity.files.derived_json): every result type of a real small
run (an int4 MLP made by ONNX Runtime's quantizer, judged with its noise floor and layers)
goes to JSON and back equal, a field added to any of them is carried with no codec edit, and
a malformed saved run is refused in one line that names the field."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import zipfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
import pytest
import torch

from parity.cli import main
from parity.errors import FieldError
from parity.files.derived_json import decode, encode, form_of
from parity.pipeline import RunConfig, run_validation
from parity.reports.saved_run import load_run
from parity.results import FrozenNodes, StaticAxes, ValidationRun
from parity.results.by_name import analysis_result
from tests.helpers import frozen_models

MLP_SOURCE = """
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def make():
    torch.manual_seed(0)
    return MLP().eval()
"""


@pytest.fixture(scope="module")
def int4_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[ValidationRun, Path, ValidationRun]:
    """(the run, its saved file, other runs' values): an int4 file judged with --layers and
    --suggest, so that its quantization, layers and suggestions are real; the float export it
    was made from judged with --noise-floor (an int4 file has no float noise floor), and a
    model frozen at its export's size (tests/helpers/frozen_models.py: its frozen node)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    root = tmp_path_factory.mktemp("derived")
    source = root / "mlp.py"
    source.write_text(MLP_SOURCE)
    namespace: dict[str, Any] = {}
    exec(compile(MLP_SOURCE, str(source), "exec"), namespace)
    raw = root / "mlp.onnx"
    torch.onnx.export(
        namespace["make"](),
        (torch.randn(2, 3, 64),),  # 3-d: MatMul (a Gemm is not quantized)
        str(raw),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "b", 1: "t"}},
        dynamo=False,
    )
    logging.getLogger().setLevel(logging.ERROR)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(raw)), block_size=32, is_symmetric=True)
    quantizer.process()
    int4 = root / "mlp_int4.onnx"
    quantizer.model.save_model_to_file(str(int4), use_external_data_format=False)
    model = f"{source}:make"
    run = run_validation(
        RunConfig(model=model, onnx=str(int4), n_input_sets=2, layers=True, suggest=True)
    )
    floor = run_validation(RunConfig(model=model, onnx=str(raw), noise_floor=True))
    frozen_models.write_models(root)
    with contextlib.redirect_stdout(io.StringIO()):
        pool = frozen_models.export(root, "pool", dynamo=False)
    frozen = run_validation(RunConfig(model=f"{root / 'models.py'}:pool", onnx=str(pool)))
    assert frozen.frozen  # the Div by height x width, found and confirmed
    others = floor.with_result("frozen", FrozenNodes(frozen.frozen))
    others = others.with_result("static_axes", StaticAxes(frozen.static_axes))
    return run, run.save(root / "int4.parity.npz"), others


OWN_CODECS = {"LayersResult", "ErrorProfile", "Tolerances", "DataResult"}
"""Written by their own code, arrays and all (--layers, the re-judge profile, --data)."""


def _values(value: Any) -> list[Any]:
    """Every dataclass instance inside `value` (the run's object graph) but those with their
    own codecs, outermost first."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if type(item).__name__ in OWN_CODECS:
            continue
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            found.append(item)
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return found


def _given(value: Any) -> dict[str, Any]:
    """The fields a type's form leaves to the caller (arrays: a saved run's members)."""
    return {name: getattr(value, name) for name in form_of(type(value)).skip}


def _derived(run: ValidationRun) -> list[Any]:
    """The run's values that the derived codec writes whole (not the run and its records,
    which the manifest lays out with their arrays)."""
    own = {"ValidationRun", "InputCase", "CandidateRun"}
    return [v for v in _values(run) if type(v).__name__ not in own]


def test_every_result_type_of_a_real_run_round_trips(int4_run) -> None:
    run, saved, floor = int4_run
    values = _derived(run) + _derived(floor)
    names = {type(v).__name__ for v in values}
    # the run made each of these (not hand-written): what it could not make is not claimed
    assert {
        "OutputComparison",
        "ErrorStats",
        "Noise",
        "Tolerance",
        "CandidateInfo",
        "Provenance",
        "OnnxSignature",
        "TensorSpec",
        "InputSet",
        "OutputSet",
        "AnalysisNote",
        "QuantizationResult",
        "QuantizedWeight",
        "QuantizedOutput",
        "SuggestedTolerances",
        "FrozenNode",
    } <= names, names
    for value in values:
        for exact in (True, False):
            text = json.dumps(encode(value, exact=exact), allow_nan=False)
            again = decode(type(value), json.loads(text), "v", **_given(value))
            assert again == value or not exact, type(value).__name__
    # and the whole run, saved and reopened, has every one of them back
    reopened = load_run(saved)
    assert reopened.quantization == run.quantization and reopened.quantization is not None
    bare = [dataclasses.replace(c, profile=None) for c in run.outputs]
    assert [dataclasses.replace(c, profile=None) for c in reopened.outputs] == bare
    for old, new in zip(run.outputs, reopened.outputs, strict=True):  # the profile: members
        assert old.profile is not None and new.profile is not None
        for key, array in old.profile.to_arrays().items():
            np.testing.assert_array_equal(new.profile.to_arrays()[key], array)
    assert all(c.noise for c in floor.outputs)
    assert reopened.suggested_tolerances == run.suggested_tolerances
    assert reopened.provenance == run.provenance and reopened.analyses == run.analyses
    assert reopened.signature == run.signature and reopened.infos == run.infos


def test_a_field_added_to_any_type_is_carried_with_no_codec_edit(int4_run) -> None:
    """Another engineer adds `added: float = 0.5` (and a list of texts) to a result type: the
    derived codec writes it, reads it back, and a file saved before it reads its default."""
    run, _, floor = int4_run
    seen: set[type] = set()
    for value in _derived(run) + _derived(floor):
        cls = type(value)
        if cls in seen or form_of(cls).unwrap:  # written as its one field: a list the report has
            continue
        seen.add(cls)
        grown = dataclasses.make_dataclass(
            f"Grown{cls.__name__}",
            [
                ("added", float, dataclasses.field(default=0.5)),
                ("added_notes", tuple[str, ...], dataclasses.field(default=())),
                ("added_kind", Literal["one", "two"], dataclasses.field(default="one")),
                ("added_sizes", list[int], dataclasses.field(default_factory=list)),
            ],
            bases=(cls,),
            frozen=True,
        )
        kept = {f.name: getattr(value, f.name) for f in dataclasses.fields(cls) if f.init}
        new = grown(**kept, added=2.25, added_notes=("a", "b"), added_kind="two", added_sizes=[3])
        data = encode(new)
        assert data["added"] == 2.25 and data["added_notes"] == ["a", "b"], cls.__name__
        assert decode(grown, data, "v", **_given(new)) == new, cls.__name__
        for key in ("added", "added_notes", "added_kind", "added_sizes"):
            del data[key]  # saved before they existed
        old = decode(grown, data, "v", **_given(new))
        assert (old.added, old.added_notes, old.added_kind, old.added_sizes) == (0.5, (), "one", [])
        with pytest.raises(FieldError, match=r"^v\.added: expected a finite number"):
            decode(grown, {**encode(new), "added": "much"}, "v", **_given(new))
        with pytest.raises(FieldError, match=r"^v\.added_kind: 'three' is not one of"):
            decode(grown, {**encode(new), "added_kind": "three"}, "v", **_given(new))
    assert len(seen) >= 12


def _forged(saved: Path, target: Path, edit) -> Path:
    """A copy of a saved run with its manifest edited and its hash recomputed (a forger can)."""
    import hashlib

    with zipfile.ZipFile(saved) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zf:
        for info, data in items:
            if info.filename == "manifest.json":
                manifest = json.loads(data)
                edit(manifest)
                data = json.dumps(manifest).encode()
                digest = hashlib.sha256(data).hexdigest().encode()
            zf.writestr(info, data)
        zf.comment = b"parity.run/1 manifest.json sha256 " + digest
    return target


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            lambda m: m["candidates"][0]["quantization"]["weights"][0].update(bits="four"),
            "candidates[0].quantization.weights[0].bits: expected an integer",
        ),
        (
            lambda m: m["suggested_tolerances"].update(basis="guess"),
            "suggested_tolerances.basis: 'guess' is not one of rounding, observed",
        ),
        (
            lambda m: m["candidates"][0]["quantization"]["weights"][0].update(shape=[1, 2, 3]),
            "candidates[0].quantization.weights[0].shape: expected 2 entries",
        ),
        (
            lambda m: m["candidates"][0]["layers"]["values"][0].update(order="first"),
            "candidates[0].layers.values[0].order: expected an integer",
        ),
        (
            lambda m: m["analyses"].extend([{"analysis": "x", "text": "y"}] * 10_001),
            "analyses: 10,",
        ),
    ],
)
def test_a_malformed_saved_run_is_refused_in_one_line(
    int4_run, edit, said: str, tmp_path: Path, capsys
) -> None:
    _, saved, _ = int4_run
    forged = _forged(saved, tmp_path / "forged.parity.npz", edit)
    assert main(["report", str(forged)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in lines[0], lines


def test_the_arrays_stay_members_not_json(int4_run) -> None:
    """Arrays never enter the manifest: the derived codec leaves them to the container."""
    _, saved, _ = int4_run
    with zipfile.ZipFile(saved) as zf:
        manifest = zf.read("manifest.json").decode()
        members = [n for n in zf.namelist() if n.endswith(".npy")]
    assert "<array" not in manifest and members
    with zipfile.ZipFile(saved) as zf:
        assert np.load(zf.open(members[0])).size > 0


@analysis_result("probe_for_the_codec_test")
@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """A new analysis's result, as its module would declare it: nothing else is edited."""

    worst: float
    nodes: tuple[str, ...] = ()
    note: str | None = None


def test_a_new_analysis_result_is_saved_and_reported_by_its_name(int4_run, tmp_path) -> None:
    """ValidationRun holds analysis results by name: a type registered under a new name goes
    into the saved run, back out, and into the JSON report with no codec edit."""
    run, _, _ = int4_run
    probe = ProbeResult(worst=float("inf"), nodes=("/fc1/MatMul_Q4",), note="found")
    grown = run.with_results("probe_for_the_codec_test", {0: probe})
    again = load_run(grown.save(tmp_path / "probe.parity.npz"))
    assert again.candidates[0].result("probe_for_the_codec_test", ProbeResult) == probe
    assert again.quantization == run.quantization  # the registered analyses' own, as before
    report = again.to_json()
    assert report["probe_for_the_codec_test"] == {
        "worst": None,  # strict JSON: null where the saved run keeps "inf"
        "nodes": ["/fc1/MatMul_Q4"],
        "note": "found",
    }
    assert report["quantization"]["bits"] == "int4"


def test_an_analysis_result_never_replaces_a_field_of_the_json() -> None:
    """A result registered under a name the report or a candidate's entry already uses
    ("layers", "index") is refused where it would be written, never saved over it."""
    from parity.reports.report_json import put_results

    entry = {"index": 0, "layers": None}
    with pytest.raises(ValueError, match="analysis result 'layers' would replace"):
        put_results(entry, {"layers": ProbeResult(worst=1.0)}, exact=True)
    put_results(entry, {"probe": ProbeResult(worst=1.0)}, exact=True)
    assert entry["probe"] == {"worst": 1.0, "nodes": [], "note": None}
