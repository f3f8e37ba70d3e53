"""Several --onnx files as pipeline stages: each judged against torch and against the stage
before it (from the outputs the run holds), the first stage where the numbers break named
first among the findings. Reuses the session's candidate exports (legacy and dynamo are both
right; the buggy one's GELU is the tanh approximation scaled by 1.01)."""

from __future__ import annotations

import json

from parity.pipeline import RunConfig, run_validation
from parity.show.findings import findings_json
from tests.helpers.candidate_exports import Exports


def _stages(exports: Exports, *files, stages: bool = True) -> tuple[object, list[dict]]:
    config = RunConfig(
        model=f"{exports.models}:make",
        onnx=tuple(str(f) for f in files),
        n_input_sets=2,
        stages=stages,
    )
    run = run_validation(config)
    return run, json.loads(json.dumps(findings_json(run)))


def test_the_first_stage_where_the_numbers_break_is_named_first(candidate_exports) -> None:
    exports = candidate_exports
    run, findings = _stages(exports, exports.legacy, exports.dynamo, exports.buggy)
    assert [c.info.onnx for c in run.candidates] == [
        str(exports.legacy),
        str(exports.dynamo),
        str(exports.buggy),
    ]  # the stages keep their order
    first = findings[0]
    assert first["kind"] == "stage" and first["candidate"] is None
    text = first["text"]
    assert text.startswith("The numbers first break at #2 buggy.onnx (against #1 dynamo.onnx")
    assert "#1 dynamo.onnx agrees with #0 legacy.onnx within the run's tolerance" in text
    assert "#2 buggy.onnx differs from #1 dynamo.onnx by max" in text
    assert [a.analysis for a in run.analyses if a.analysis == "stages"] == ["stages"]


def test_stages_that_hold_say_so_and_one_file_has_no_stages(candidate_exports) -> None:
    exports = candidate_exports
    _, findings = _stages(exports, exports.dynamo, exports.legacy)
    assert findings[0]["kind"] == "stage"
    assert findings[0]["text"].startswith("The numbers hold through every stage.")
    _, alone = _stages(exports, exports.legacy)
    assert not [f for f in alone if f["kind"] == "stage"]


def test_exports_side_by_side_are_stages_only_when_asked(candidate_exports, tmp_path) -> None:
    """Two exports of the model (legacy, buggy) are files side by side, not a pipeline: no
    stage finding without stages=True (--stages). A float16 copy of the legacy export (ONNX
    Runtime's converter) is a conversion of it: stages without asking."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    exports = candidate_exports
    run, side_by_side = _stages(exports, exports.legacy, exports.buggy, stages=False)
    assert not [f for f in side_by_side if f["kind"] == "stage"]
    assert not [a for a in run.analyses if a.analysis == "stages"]
    from parity.reports.html_report import render_html_report

    page = render_html_report(run)  # two files: "What we found", as one file's report has
    assert "What we found" in page
    assert any(f["candidate"] == 1 for f in side_by_side)
    assert "<li class='finding" in page and "#1 buggy.onnx (CPU, all): " in page
    half = tmp_path / "half.onnx"
    onnx.save(
        convert_float_to_float16(onnx.load(str(exports.legacy)), keep_io_types=True), str(half)
    )
    _, pipeline = _stages(exports, exports.legacy, half, stages=False)
    assert pipeline[0]["kind"] == "stage"
    _, backwards = _stages(exports, half, exports.legacy, stages=False)  # not a conversion
    assert not [f for f in backwards if f["kind"] == "stage"]
