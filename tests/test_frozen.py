"""Frozen at export (parity.judge.frozen): models written the way the field writes them,
exported at batch 1, 64 x 48 by the legacy and the dynamo exporter, validated by default.

Each frozen case exits 1 and names the node holding the size, the export's size and the
source line, confirmed by real runs; ONNX Runtime raising on one input set is that set's
error beside the others; the controls pass at two sizes with nothing named.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from parity.cli import main
from tests.helpers import frozen_models
from tests.helpers.frozen_models import line_of

EXPORTERS = ("legacy", "dynamo")


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:
    """Every model of tests/helpers/frozen_models.py, exported both ways, once per module."""
    root = tmp_path_factory.mktemp("frozen")
    frozen_models.write_models(root)
    with contextlib.redirect_stdout(io.StringIO()):
        for name in frozen_models.NAMES:
            for exporter in EXPORTERS:
                frozen_models.export(root, name, dynamo=exporter == "dynamo")
    return root


def validate(root: Path, name: str, onnx: str | Path, *flags: str) -> tuple[int, dict]:
    report = root / f"{Path(onnx).stem}.{len(flags)}.json"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["validate", "--model", f"{root / 'models.py'}:{name}", "--onnx", str(onnx)]
            + ["--json", str(report), *flags]
        )
    return code, json.loads(report.read_text())


def onnx_of(root: Path, name: str, exporter: str) -> Path:
    return root / f"{name}_{exporter}.onnx"


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_a_mean_written_by_hand_names_the_div_by_height_times_width(exports, exporter) -> None:
    code, report = validate(exports, "pool", onnx_of(exports, "pool", exporter))
    assert code == 1 and report["verdict"] == "fail"
    assert len(report["input_sets"]) == 2  # two sizes by default: the file has dynamic axes
    [frozen] = report["frozen"]
    assert frozen["node"] == ("/Div" if exporter == "legacy" else "node_div")
    assert (frozen["op"], frozen["kind"], frozen["constant"]) == ("Div", "size", [3072.0])
    assert frozen["dims"] == {"height": 64, "width": 48}
    assert frozen["source"] == f"models.py:{line_of('pooled = y.sum')}"
    assert frozen["confirmed"] is True
    assert "3072" in frozen["text"] and "height × width" in frozen["text"]
    assert "64 × 48" in frozen["text"] and frozen["text"].startswith("This export only works")


def test_a_flatten_read_from_the_shape_names_the_reshape_and_the_export_size(exports) -> None:
    code, report = validate(exports, "flatten", onnx_of(exports, "flatten", "legacy"))
    assert code == 1
    assert {o["status"] for o in report["outputs"]} == {"error"}  # ORT raises at both sizes
    [frozen] = report["frozen"]
    assert (frozen["node"], frozen["op"]) == ("/Reshape", "Reshape")
    assert frozen["constant"] == [1.0, 8.0, 3072.0]
    assert frozen["dims"] == {"batch": 1, "height": 64, "width": 48}
    assert frozen["source"] == f"models.py:{line_of('flat = y.reshape')}"  # a re-trace's
    assert frozen["confirmed"] is True


def test_onnx_runtime_raising_on_one_set_is_that_sets_error_beside_the_others(exports) -> None:
    """Set 0 at the export's own size passes; set 1 raises in the Reshape: its row is an
    error with ORT's line, set 0 is still compared and shown; FAIL, exit 1."""
    sizes = ["--dim", "batch=1", "--dim", "height=64", "--dim", "width=48", "--input-sets", "2"]
    onnx = onnx_of(exports, "flatten", "legacy")
    code, report = validate(exports, "flatten", onnx, *sizes)
    assert code == 1 and report["verdict"] == "fail"
    status = {o["input_set"]: o["status"] for o in report["outputs"]}
    assert status == {0: "pass", 1: "error"}
    error = next(o for o in report["outputs"] if o["status"] == "error")
    assert error["message"].startswith("ONNX Runtime raised: Reshape node '/Reshape'")
    assert "requested shape:{1,8,3072}" in error["message"] and "\n" not in error["message"]
    assert report["frozen"][0]["node"] == "/Reshape"


def test_position_embeddings_resized_to_the_export_grid_name_the_resize(exports) -> None:
    code, report = validate(exports, "pos_embed", onnx_of(exports, "pos_embed", "legacy"))
    assert code == 1
    assert {o["status"] for o in report["outputs"]} == {"error"}  # the Add cannot broadcast
    [frozen] = report["frozen"]
    assert (frozen["node"], frozen["op"], frozen["kind"]) == ("/Resize", "Resize", "size")
    assert frozen["constant"] == [1.0, 8.0, 8.0, 6.0]
    assert frozen["dims"] == {"height": 64, "width": 48}
    assert frozen["source"] == f"models.py:{line_of('F.interpolate')}"
    assert "8 = height // 8" in frozen["text"] and "6 = width // 8" in frozen["text"]


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_a_pad_kept_from_the_exports_branch_is_named_a_branch(exports, exporter) -> None:
    code, report = validate(exports, "pad32", onnx_of(exports, "pad32", exporter))
    assert code == 1
    [frozen] = report["frozen"]
    assert frozen["kind"] == "branch" and frozen["op"] == "Pad"
    assert frozen["node"] == ("/Pad" if exporter == "legacy" else "node_pad")
    assert list(frozen["dims"]) == ["width"]  # the dim that decides the branch
    assert frozen["dims"]["width"] % 32  # where the file works, torch pads too
    assert frozen["source"] == f"models.py:{line_of('x = F.pad')}"
    assert frozen["confirmed"] is True and "branch" in frozen["text"]


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_the_clean_control_passes_at_two_sizes_with_nothing_named(exports, exporter) -> None:
    code, report = validate(exports, "clean", onnx_of(exports, "clean", exporter))
    assert code == 0 and report["verdict"] == "pass"
    shapes = [s["inputs"]["x"]["shape"] for s in report["input_sets"]]
    assert len(shapes) == 2 and shapes[0] != shapes[1]
    assert all(a != b for a, b in zip(shapes[0], shapes[1], strict=True) if a != 3)
    assert report["frozen"] == []


def test_input_sets_1_keeps_one_size(exports) -> None:
    code, report = validate(
        exports, "clean", onnx_of(exports, "clean", "legacy"), "--input-sets", "1"
    )
    assert code == 0 and len(report["input_sets"]) == 1


def test_a_constant_that_merely_equals_a_size_is_not_named(exports) -> None:
    """A Mul by 32.0, the model's own number, in a file with a real bias bug: it fails at every
    size, 32 equals the default height, and no recomputed constant makes it agree: nothing is
    named frozen."""
    onnx = frozen_models.nudged(onnx_of(exports, "scaled", "legacy"), "conv.bias", 0.1)
    code, report = validate(exports, "scaled", onnx)
    assert code == 1
    assert report["frozen"] == []


def test_the_terminal_and_the_html_report_say_the_frozen_node(exports, capsys) -> None:
    html = exports / "pool.html"
    code = main(
        ["validate", "--model", f"{exports / 'models.py'}:pool"]
        + ["--onnx", str(onnx_of(exports, "pool", "legacy")), "--html", str(html)]
    )
    assert code == 1
    out = capsys.readouterr().out
    found = out[out.index("What we found:") :]  # said once, among the findings
    assert "node '/Div' divides by 3072" in found and out.count("divides by 3072") == 1
    assert "Not measured in this run" not in out  # the frozen size is the answer
    assert "node &#x27;/Div&#x27; divides by 3072" in html.read_text()


def test_an_axis_dynamo_made_static_is_said_in_one_line(exports) -> None:
    """torch.export specialised height and width (the model reads ints from the shape): the
    file takes only 64 x 48 though the torch model runs at other sizes; it passes at its one
    size, and each fixed axis is said."""
    code, report = validate(exports, "pos_embed", onnx_of(exports, "pos_embed", "dynamo"))
    assert code == 0
    axes = {(a["input"], a["axis"], a["size"]) for a in report["static_axes"]}
    assert axes == {("x", 2, 64), ("x", 3, 48)}
    assert all(
        "fixed at" in a["text"] and "torch model" in a["text"] for a in report["static_axes"]
    )
    assert report["frozen"] == []
    said = [f["text"] for f in report["findings"] if f["kind"] == "static_axis"]
    assert said == [a["text"] for a in report["static_axes"]]  # one list every front renders


def test_a_static_axis_the_torch_model_needs_is_not_said(exports) -> None:
    """The clean control fixes only its channels (3), which the model needs: nothing is said."""
    code, report = validate(exports, "clean", onnx_of(exports, "clean", "dynamo"))
    assert code == 0 and report["static_axes"] == []


def test_the_dashboard_shows_the_error_cell_and_the_frozen_node(exports) -> None:
    """Overview: the sets x outputs grid with an error cell and the frozen node beside it;
    Inspect opens on the run (the raising set has no ONNX values to draw) without an error."""
    from streamlit.testing.v1 import AppTest

    import parity

    app = str(Path(__file__).resolve().parent.parent / "app.py")
    run = parity.validate(
        f"{exports / 'models.py'}:flatten",
        onnx_of(exports, "flatten", "legacy"),
        input_sets=2,
        dims={"batch": 1, "height": 64, "width": 48},
    )
    assert [c.status.value for c in run.outputs] == ["pass", "error"]
    assert run.frozen and run.frozen[0].node == "/Reshape"
    at = AppTest.from_file(app, default_timeout=120)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    text = "\n".join(m.value for m in at.markdown)
    assert "Frozen at export" in text and "/Reshape" in text
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]  # decoded: plotly
    # writes "×" as \u00d7 unless orjson is installed
    grid = next(s for s in specs if "× outputs" in json.dumps(s, ensure_ascii=False))
    marks = json.dumps(grid["data"], ensure_ascii=False)
    assert "error" in marks and "✓" in marks
    at.switch_page("pages/run.py").run()  # the Run page's result box says it too
    assert not at.exception
    said = "\n".join(m.value for m in at.markdown)
    assert "What we found" in said and "This export only works at its own size" in said
    at.switch_page("pages/inspect_page.py").run()
    assert not at.exception


def test_a_legacy_exports_unnamed_dynamic_axes_still_name_the_size(exports) -> None:
    """`dynamic_axes={"x": [0, 2, 3]}` names the dims x_dynamic_axes_1.. : the first axis is
    still taken for the batch (1 = batch), height and width for the product."""
    import torch

    model = frozen_models.load(exports, "flatten")
    path = exports / "flatten_list.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(
            model, (torch.randn(*frozen_models.EXPORT_SHAPE),), str(path), dynamo=False,
            input_names=["x"], output_names=["y"], dynamic_axes={"x": [0, 2, 3]},
        )  # fmt: skip
    code, report = validate(exports, "flatten", path)
    assert code == 1
    [frozen] = report["frozen"]
    assert frozen["node"] == "/Reshape" and frozen["confirmed"] is True
    assert sorted(frozen["dims"].values()) == [1, 48, 64]
