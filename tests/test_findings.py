"""One set of findings, decided once (parity.show.findings), rendered by every front: the
terminal, the JSON report's `findings`, the HTML report's "What we found" and the API
(`run.findings`). Real torch, real ONNX Runtime, real legacy exports with a planted bug; the
kinds other engineers fill (frozen sizes, ONNX Runtime errors, near ties) are set on a real
run with dataclasses.replace."""

from __future__ import annotations

import html
import inspect
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from parity import validate
from parity.cli.output import format_text
from parity.reports.html_report import render_html_report
from parity.results import (
    FINDING_KINDS,
    FrozenNode,
    FrozenNodes,
    GenerationInfo,
    Noise,
    PromptGeneration,
    Status,
    TokenDivergence,
)
from tests.helpers.plant_bug import export_with_bias_bug
from tests.helpers.precision_models import to_float16


class SoftmaxNet(torch.nn.Module):
    """Two convolutions ending in a softmax over channels (an "activations" output)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv1d(4, 16, 3, padding=1)
        self.c2 = torch.nn.Conv1d(16, 32, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.c2(torch.relu(self.c1(x))) * 4, dim=1)


@dataclass(frozen=True)
class Exports:
    model: torch.nn.Module
    clean: Path
    bug: Path  # /c2/Conv's bias + 0.01
    f16: Path


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Exports:
    tmp = tmp_path_factory.mktemp("findings")
    torch.manual_seed(0)
    model = SoftmaxNet().eval()
    clean, bug = export_with_bias_bug(model, tmp)
    return Exports(model, clean, bug, to_float16(clean, tmp / "net16.onnx"))


@pytest.fixture(scope="module")
def bug_run(exports: Exports):
    return validate(exports.model, exports.bug, layers=True, noise_floor=True, input_sets=2)


def _with_noise_ratio(run, ratio: float):
    """The run as if its float32 floor were large (a softmax's can be 2.6e-4): every noise
    at `ratio`, within what rounding could explain."""
    rows = tuple(
        replace(c, noise=replace(c.noise, ratio=ratio, torch_error=c.noise.onnx_error / ratio))
        if c.noise is not None
        else c
        for c in run.outputs
    )
    return run.with_rows(rows)


def test_a_confirmed_birth_makes_the_output_a_bug_even_within_rounding(bug_run) -> None:
    """The softmax output's noise ratio within rounding (2.7x, as on a real softmax encoder)
    cannot clear it: the layers confirm the error is made at /c2/Conv, so it is a bug only,
    the ratio said beside it; no output is both bug and rounding."""
    assert bug_run.layers.confirmation_of(bug_run.layers.first_divergence).outcome == "born"
    for run in (bug_run, _with_noise_ratio(bug_run, 2.7)):
        mine = [f for f in run.findings if f.output == "activations"]
        assert [f.kind for f in mine] == ["bug"], mine
        assert "/c2/Conv" in mine[0].text
        assert not any(f.kind == "rounding" for f in run.findings)
    said = next(f for f in _with_noise_ratio(bug_run, 2.7).findings if f.output == "activations")
    assert "2.7\u00d7 torch's own float32 error" in said.text
    assert "could pass for float32 rounding" in said.text


def test_without_layers_a_ratio_within_rounding_is_rounding_at_its_precision(bug_run) -> None:
    run = _with_noise_ratio(bug_run.with_layers({0: None}), 2.7)
    (found,) = [f for f in run.findings if f.output == "activations"]
    assert found.kind == "rounding" and found.text.startswith("activations: float32 rounding")
    assert run.findings[-1].kind == "unmeasured" and "--layers" in run.findings[-1].text


def test_a_float16_files_findings_say_float16(exports: Exports) -> None:
    run = validate(exports.model, exports.f16, noise_floor=True, input_sets=2)
    assert not run.passed  # float16 rounding is past the default atol 1e-5
    text = " ".join(f.text for f in run.findings)
    assert "float16" in text and "float32" not in text, run.findings
    rounding = [f for f in run.findings if f.kind == "rounding"]
    bugs = [f for f in run.findings if f.kind == "bug"]
    assert len(rounding) + len(bugs) == 1  # one conclusion for the one output
    for f in rounding:
        assert f.text.startswith("activations: float16 rounding, not a bug")
    # without --noise-floor, torch with the file's float16 weights against the file's wide
    # twin says it (parity.analyses.approximation); left out, what was not measured is
    # named at the file's precision too
    plain = validate(exports.model, exports.f16, input_sets=1)
    (said,) = [f for f in plain.findings if f.kind == "rounding"]
    assert said.text.startswith("activations: float16 rounding, not a bug")
    assert "--noise-floor" not in " ".join(f.text for f in plain.findings)
    bare = validate(exports.model, exports.f16, input_sets=1, quantized_reference=False)
    (unmeasured,) = [f for f in bare.findings if f.kind == "unmeasured"]
    assert "float16 rounding (--noise-floor)" in unmeasured.text
    assert "float32" not in unmeasured.text


def test_every_front_renders_the_same_findings(bug_run, tmp_path: Path) -> None:
    report = bug_run.to_json()
    assert report["findings"] == [
        {"kind": f.kind, "output": f.output, "candidate": f.candidate, "text": f.text}
        for f in bug_run.findings
    ]
    assert {f["kind"] for f in report["findings"]} <= set(FINDING_KINDS)
    json.dumps(report, allow_nan=False)  # strict
    terminal = format_text(bug_run)
    page = render_html_report(bug_run)
    section = page[page.index("What we found") :]
    items = [
        html.unescape(x) for x in re.findall(r"<li class='finding [a-z_]+'>(.*?)</li>", section)
    ]
    assert items == [f.text for f in bug_run.findings]
    for f in bug_run.findings:
        assert f"  - {f.text}" in terminal


def test_frozen_error_and_near_tie_findings(bug_run) -> None:
    """The kinds other parts of Parity fill: confirmed frozen nodes (their ready sentence),
    rows where ONNX Runtime raised (their message), an LLM's near tie."""
    frozen = (
        FrozenNode("/Reshape", "Reshape", "size", (1.0, 8.0, 64.0), {"t": 64}, None, True,
                   "The Reshape node /Reshape holds t = 64, frozen at the export's size."),
        FrozenNode("/Div", "Div", "size", (64.0,), {"t": 64}, None, False, "unconfirmed"),
    )  # fmt: skip
    rows = tuple(
        replace(c, status=Status.ERROR, message="Reshape node '/Reshape' requested shape\nmore")
        if c.input_set == 1
        else c
        for c in bug_run.outputs
    )
    tie = TokenDivergence(3, 11, 12, 0.01, 0.02, near_tie=True, logits_passed=True)
    generation = GenerationInfo(
        summary={}, steps=(), prompts=(PromptGeneration("hi", (1,), (2,), "a", "b", tie),)
    )
    run = replace(bug_run.with_rows(rows), generation=generation)
    run = run.with_result("frozen", FrozenNodes(frozen))
    kinds = [f.kind for f in run.findings]
    assert kinds.count("frozen") == 1 and "unconfirmed" not in str(run.findings)
    (error,) = [f for f in run.findings if f.kind == "error"]
    assert error.output is None and "Reshape node '/Reshape' requested shape" in error.text
    assert "more" not in error.text  # the message's first line
    (near,) = [f for f in run.findings if f.kind == "near_tie"]
    assert "new token 4" in near.text and "near tie" in near.text


def test_a_passing_run_concludes_nothing(exports: Exports) -> None:
    run = validate(exports.model, exports.clean, atol=1e-4)
    assert run.passed and run.findings == () and run.to_json()["findings"] == []


def test_noise_of_a_bf16_file_is_named_bfloat16(bug_run) -> None:
    rows = tuple(
        replace(c, noise=Noise(1e-3, 2e-3, 2.0, precision="bfloat16")) for c in bug_run.outputs
    )
    run = bug_run.with_rows(rows).with_layers({0: None})
    (found,) = [f for f in run.findings if f.output == "activations"]
    assert found.text.startswith("activations: bfloat16 rounding, not a bug")


def test_words_under_a_confirmed_birth_never_say_unconfirmed(bug_run) -> None:
    """A reopened run keeps no repro case: the Layers page's reason must not call the
    confirmed birth unconfirmed."""
    from parity.layers.repro import no_repro_reason

    said = no_repro_reason(replace(bug_run.layers, repro=None))
    assert "unconfirmed" not in said and "confirmed" in said


def test_the_terminal_and_html_show_every_candidate_note(exports: Exports) -> None:
    """What ONNX Runtime really computed a float16 file in (the dashboard's note by the
    verdict) is in the terminal and the HTML report too."""
    run = validate(exports.model, exports.f16)
    (note,) = [n for n in run.infos[0].notes if n.startswith("ONNX Runtime ran ")]
    assert f"note: {note}" in format_text(run)
    assert html.escape(note, quote=True) in render_html_report(run)


def test_the_where_sentence_names_the_channel_the_worst_elements_point_at(
    exports: Exports, tmp_path: Path
) -> None:
    """A bias bug on channel 17 under a softmax: every channel mismatches a little (the
    softmax renormalises), channel 17 by far the most; the sentence names it."""
    import onnx
    from onnx import numpy_helper

    from parity.judge.where import where_of

    model = onnx.load(str(exports.clean))
    (bias,) = [t for t in model.graph.initializer if t.name == "c2.bias"]
    a = numpy_helper.to_array(bias).copy()
    a[17] += 0.05
    bias.CopyFrom(numpy_helper.from_array(a, bias.name))
    path = tmp_path / "bias17.onnx"
    onnx.save(model, str(path))
    run = validate(exports.model, path, input_sets=2, atol=1e-4)
    for c in run.outputs:
        assert c.stats.worst_index[1] == 17
        said = where_of(run, c).summary
        assert "the largest errors lie at index 17 of axis 1" in said, said
        assert "axis 0" not in said


def test_a_finding_of_one_of_several_files_names_its_file(exports: Exports) -> None:
    """Two files side by side, the clean one passing: the bug said of the other names it
    (a bare "out: not rounding" read as said of both)."""
    from parity.pipeline import run_validation
    from parity.run.config import RunConfig
    from parity.show.findings import run_findings

    spec = str(exports.clean.parent / "models.py") + ":net"
    (exports.clean.parent / "models.py").write_text(  # SoftmaxNet, as the fixture seeds it
        "import inspect\nimport torch\n\n"
        + inspect.getsource(SoftmaxNet)
        + "\n\ndef net():\n    torch.manual_seed(0)\n    return SoftmaxNet().eval()\n"
    )
    onnx = (str(exports.clean), str(exports.bug))
    run = run_validation(RunConfig(model=spec, onnx=onnx, n_input_sets=1))
    assert [c.passed for c in run.candidates] == [True, False]  # the premise
    said = [f for f in run_findings(run) if f.candidate is not None]
    assert said and all(f.candidate == 1 for f in said), said
    assert all(f.text.startswith(f"{run.candidates[1].label}: ") for f in said), said
    page = render_html_report(run)
    assert "1 fail (1 output, 1 input set)" in page  # never "1 outputs"
    label = html.escape(run.candidates[1].label, quote=True)
    assert f"<li class='finding bug'>{label}: " in page and f"{label}: {label}" not in page


def test_by_default_a_bug_a_loosened_tolerance_passes_is_said(exports: Exports) -> None:
    """Issue 60: no --noise-floor, a --tol that passes the planted bug: the default floor
    measures the rows that pass only at a loosened tolerance, so the bug is said, and the
    headline never says "matches" above it."""
    from parity.show.findings import HIDDEN_BY_TOLERANCE
    from parity.show.summary import headline

    run = validate(exports.model, exports.bug, input_sets=1, tolerances={"activations": 0.1})
    assert run.passed
    (bug,) = [f for f in run.findings if f.kind == "bug"]
    assert bug.text.startswith(f"activations: {HIDDEN_BY_TOLERANCE}"), run.findings
    assert headline(run).startswith(
        "Every output is within the tolerances set, but activations passes only because of its"
    ), headline(run)
    # its rows say the same: red "✗ pass: a bug the tolerance hides", never a green pass
    from parity.show.cause_labels import HIDDEN_BUG_MARKED
    from parity.show.rows import comparison_rows, output_rows

    rows = [r for r in comparison_rows(run) if r.name == "activations"]
    assert rows and all(r.cell("status", "marked") == HIDDEN_BUG_MARKED for r in rows)
    (merged,) = [r for r in output_rows(run) if r.name == "activations"]
    assert merged.cell("status", "marked") == HIDDEN_BUG_MARKED
    others = [r for r in comparison_rows(run) if r.name != "activations"]
    assert all(not r.hidden_bug for r in others)
    page = render_html_report(run)
    said = "<td class='name'>activations</td><td class='status'>pass: a bug the tolerance hides"
    assert "<tr class='fail'><td>0</td>" + said in page
    clean = validate(exports.model, exports.clean, input_sets=1, tolerances={"activations": 0.1})
    assert not [f for f in clean.findings if f.kind == "bug"]  # rounding: nothing hidden
    assert headline(clean).startswith("The export matches")
    assert not any(r.hidden_bug for r in comparison_rows(clean))


def test_beside_a_float16_file_a_float32_bug_is_said_and_each_finding_names_its_file(
    tmp_path: Path, capsys
) -> None:
    """Two files side by side, a float16 one and a float32 one with a bug: the default floor
    skipped the whole run for the float16 file, leaving the bug unexplained under "logits:
    float16 rounding, not a bug"; the terminal's findings did not say which file each was."""
    from parity.cli import main
    from parity.load.demos import SHIPPED_DIR
    from tests.helpers.plant_bug import plant

    fp16 = next(Path(SHIPPED_DIR).glob("fp16-*.onnx"))
    bug = tmp_path / "bug.onnx"
    plant(next(Path(SHIPPED_DIR).glob("transformer-*.onnx")), bug, "node_linear_3", "bias", 3e-3)
    args = ["validate", "--model", "demo:fp16", "--onnx", str(fp16), "--onnx", str(bug)]
    assert main([*args, "--input-sets", "1"]) == 1
    found = capsys.readouterr().out.split("What we found:")[1]
    lines = [line for line in found.splitlines() if line.startswith("  - #")]
    assert any(line.startswith(f"  - #0 {fp16.name} ") and "float16" in line for line in lines)
    said = [line for line in lines if line.startswith("  - #1 bug.onnx ")]
    assert said and all("bug in the export" in line for line in said), found
    # at a tolerance both pass: the bug is said, and the headline does not say "matches"
    html = tmp_path / "report.html"
    assert main([*args, "--input-sets", "1", "--atol", "0.05", "--html", str(html)]) == 0
    found = capsys.readouterr().out.split("What we found:")[1]
    assert "  - #1 bug.onnx (CPU, all): last_hidden_state: a bug the tolerance hides" in found
    assert (
        "Every one of the 2 ONNX candidates is within the tolerances set, but #1 bug.onnx "
        "(CPU, all) passes only because of the tolerance: Parity found a bug."
    ) in html.read_text()


def test_a_note_that_starts_with_a_name_keeps_its_case() -> None:
    """Technical notes start as sentences, but "onnx.checker: ..." read "Onnx.checker"."""
    from parity.text import sentence_start

    note = "onnx.checker: nodes must be sorted"
    assert sentence_start(note) == note
    assert sentence_start("node_linear_3 is fused") == "node_linear_3 is fused"
    assert sentence_start("the file, as given") == "The file, as given"
    assert sentence_start("ONNX Runtime ran") == "ONNX Runtime ran"
    assert sentence_start("") == ""
