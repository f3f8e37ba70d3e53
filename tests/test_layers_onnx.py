"""--layers for ONNX against ONNX (issue 21): a reference file's values against each
candidate's by name, through the names ONNX Runtime's float16 converter gives; the same
criterion and outputs as torch layers (JSON, terminal, HTML, the Layers page with its
Candidate selector). Files made in the test by the real converter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from parity.cli import main
from parity.pipeline import RunConfig, run_validation
from parity.tolerances import Tolerance, Tolerances
from tests.helpers.precision_models import mlp, rms_mlp, to_float16

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layers_onnx")
    ref, rms = mlp(root / "mlp.onnx"), rms_mlp(root / "rms.onnx")
    return {
        "ref": ref,
        "f16": to_float16(ref, root / "mlp_fp16.onnx"),
        "rms": rms,
        "rms16": to_float16(rms, root / "rms_fp16.onnx"),
    }


def _validate(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    # one input set: these tests count values, and two sizes (the default) list each twice
    code = main(
        [
            "validate",
            *args,
            "--input-sets",
            "1",
            "--layers",
            "--json",
            str(out),
            "--html",
            str(html),
        ]
    )
    return code, json.loads(out.read_text()), html.read_text()


def test_float16_conversion_matches_every_value_by_name_with_its_sqnr(
    files, tmp_path: Path, capsys
) -> None:
    code, report, html = _validate(
        tmp_path, "--onnx", str(files["ref"]), "--onnx", str(files["f16"]), "--atol", "1e-2",
        "--rtol", "1e-2",
    )  # fmt: skip
    assert code == 0
    layers = report["layers"]
    assert layers["matching"] == "onnx names"
    assert [v["onnx_value"] for v in layers["values"]] == ["h", "hb", "r", "y"]
    assert all(v["sqnr_db"] is not None and v["sqnr_db"] > 30 for v in layers["values"])
    # float16 values under float16's threshold; the float32 output carries their error
    assert [v["status"] for v in layers["values"]] == ["pass", "pass", "pass", "carried"]
    assert layers["first_divergence"] is None
    assert "Layers: 4 values matched (onnx names)" in capsys.readouterr().out
    assert "onnx names" in html or "mm1" in html


def test_a_float16_overflow_is_localised_where_it_is_born(files, tmp_path: Path) -> None:
    """x*x of the RMS norm is past float16's range: the CPU run's output still agrees (it
    computes in float32), but the float16 value stored between ops is Inf."""
    code, report, _ = _validate(
        tmp_path, "--onnx", str(files["rms"]), "--onnx", str(files["rms16"]), "--atol", "1e-1",
        "--rtol", "1e-1",
    )  # fmt: skip
    first = report["layers"]["first_divergence"]
    assert first is not None
    assert (first["onnx_node"], first["onnx_value"], first["status"]) == (
        "square", "sq", "nonfinite",
    )  # fmt: skip


@pytest.fixture(scope="module")
def two_candidates(files):
    config = RunConfig(
        model=None, onnx=[str(files["rms"]), str(files["rms16"])],
        ort_opt_level=["disable", "all"], layers=True,
        tolerances=Tolerances(default=Tolerance(atol=1e-1, rtol=1e-1)),
    )  # fmt: skip
    return run_validation(config)


def test_layers_take_several_candidates_each_with_its_own_result(two_candidates) -> None:
    """The reference is rms.onnx at level disable; candidates: rms.onnx at all, and the
    float16 file at disable and at all."""
    run = two_candidates
    assert [c.index for c in run.candidates] == [0, 1, 2]
    assert all(c.layers is not None for c in run.candidates)
    firsts = [run.candidate(k).layers.first_divergence for k in range(3)]
    assert firsts[0] is None  # float32 at another level: nothing born
    assert [f.onnx_value for f in firsts[1:]] == ["sq", "sq"]
    assert run.for_candidate(2).layers is run.candidate(2).layers
    from parity.reports.report import report_dict

    data = report_dict(run)
    assert [c["layers"]["matched"] for c in data["candidates"]] == [7, 7, 7]


def test_the_terminal_prints_every_candidates_layers_under_its_label(
    files, tmp_path: Path, capsys
) -> None:
    """Several candidates compared layer by layer: the terminal printed the first one's
    layers only; now each candidate's own, in order, under the label tables use."""
    code, report, _ = _validate(
        tmp_path, "--onnx", str(files["rms"]), "--onnx", str(files["rms16"]),
        "--ort-opt-level", "disable,all", "--atol", "1e-1", "--rtol", "1e-1",
    )  # fmt: skip
    printed = capsys.readouterr().out
    labels = [f"#{c['index']} " for c in report["candidates"]]
    assert len(labels) == 3
    heads = [line for line in printed.splitlines() if line.startswith("Layers of candidate ")]
    assert [h.removeprefix("Layers of candidate ")[:3] for h in heads] == labels
    blocks = printed.split("Layers of candidate ")[1:]
    assert "no value diverges" in blocks[0]  # float32 at another level: nothing born
    for block in blocks[1:]:  # the float16 file at both levels: x*x overflows
        assert "diverges first at Mul node 'square' -> 'sq'" in block, block
        assert "keep in float32 (node_block_list): square" in block, block


def test_the_layers_page_has_the_candidate_selector(two_candidates) -> None:
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["parity_run"] = two_candidates
    at.session_state["parity_tolerances"] = two_candidates.tolerances
    at.switch_page("pages/layers.py").run()
    assert not at.exception, at.exception
    at.selectbox(key="candidate_layers").set_value(0).run()
    assert not at.exception, at.exception
    assert any("NO DIVERGENCE" in m.value for m in at.markdown)
    at.selectbox(key="candidate_layers").set_value(2).run()
    assert not at.exception, at.exception
    assert any("DIVERGES" in m.value for m in at.markdown)
    assert [c.value for c in at.code][:1] == ["square -> sq"]


def test_a_bfloat16_file_is_compared_by_name_in_bfloat16(tmp_path: Path) -> None:
    """ORT's numpy bridge has no bfloat16: its values come back through OrtValues, are
    judged at bfloat16's threshold, and the candidate says what the CPU computed."""
    from tests.helpers.precision_models import transposes

    ref = transposes(tmp_path / "t32.onnx", bfloat16=False)
    bf16 = transposes(tmp_path / "tbf16.onnx", bfloat16=True)
    code, report, _ = _validate(
        tmp_path, "--onnx", str(ref), "--onnx", str(bf16), "--atol", "1e-1", "--rtol", "2e-2"
    )
    assert code == 0
    (cand,) = report["candidates"]
    assert any("ran 0 of 1 bfloat16 nodes in float32 on CPU" in n for n in cand["notes"])
    layers = report["layers"]
    values = {v["onnx_value"]: v for v in layers["values"]}
    assert set(values) == {"t", "u", "y"}
    assert values["t"]["status"] == "pass"  # bfloat16's rounding, at bfloat16's threshold
    assert all(v["sqnr_db"] is not None and v["sqnr_db"] > 40 for v in values.values())
    assert any(n.startswith("bfloat16 file:") for n in layers["notes"])


def test_a_reference_with_external_data_is_localised(files, tmp_path: Path) -> None:
    """A dynamo export keeps its weights in FILE.onnx.data: ONNX Runtime refuses links to
    them from a temp folder, so the session reads them from the model's own folder."""
    import onnx

    ref = tmp_path / "ext.onnx"
    onnx.save(
        onnx.load(str(files["rms"])), str(ref), save_as_external_data=True,
        all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=64,
    )  # fmt: skip
    assert (tmp_path / "ext.onnx.data").is_file()
    code, report, _ = _validate(
        tmp_path, "--onnx", str(ref), "--onnx", str(files["rms16"]), "--atol", "1e-1",
        "--rtol", "1e-1",
    )  # fmt: skip
    assert report["layers"]["first_divergence"]["onnx_value"] == "sq", report["layers"]["notes"]


def test_model_explorer_node_data_name_the_reference_nodes(files, tmp_path: Path) -> None:
    out = tmp_path / "me.json"
    main(["validate", "--onnx", str(files["rms"]), "--onnx", str(files["rms16"]), "--atol",
          "1e-1", "--layers", "--model-explorer", str(out)])  # fmt: skip
    (graph,) = json.loads(out.read_text()).values()
    assert {"mm1", "square", "mean"} <= set(graph["results"])
    assert "bgColor" in graph["results"]["square"]  # where the divergence starts
