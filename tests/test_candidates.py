"""Candidates side by side (issue 13): several ONNX files x providers x optimisation levels
against one reference run once per input set, and ONNX against ONNX. Real exports (dynamo,
legacy, a buggy one, fp16), real ONNX Runtime, the real CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from parity.cli import main
from parity.pipeline import RunConfig, run_validation
from parity.reports.saved_run import load_run, save_run
from parity.results import ValidationRun
from parity.run.config import default_loaders
from tests.helpers.candidate_exports import Exports


@pytest.fixture(scope="module")
def exports(candidate_exports: Exports) -> Exports:
    """The session's candidate exports (tests/conftest.py), read only."""
    return candidate_exports


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


def test_three_exports_at_two_levels_are_six_candidates_with_the_right_verdicts(
    exports: Exports, tmp_path: Path, capsys
):
    out = tmp_path / "r.json"
    code = main(
        [
            "validate", "--model", str(exports.pt2),
            "--onnx", str(exports.dynamo), "--onnx", str(exports.legacy),
            "--onnx", str(exports.buggy), "--ort-opt-level", "disable,all",
            "--input-sets", "2", "--json", str(out),
        ]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 1
    report = _report(out)
    got = [(Path(c["onnx"]).name, c["ort_opt_level"], c["verdict"]) for c in report["candidates"]]
    assert got == [
        ("dynamo.onnx", "disable", "pass"),
        ("dynamo.onnx", "all", "pass"),
        ("legacy.onnx", "disable", "pass"),
        ("legacy.onnx", "all", "pass"),
        ("buggy.onnx", "disable", "fail"),
        ("buggy.onnx", "all", "fail"),
    ]
    assert report["verdict"] == "fail"
    rows = report["outputs"]
    assert sorted({r["candidate"] for r in rows}) == list(range(6))
    assert len(rows) == 6 * 2 * 2  # candidates x outputs x input sets
    assert all(r["status"] == "fail" for r in rows if r["candidate"] >= 4)
    # the terminal: one table, candidates as columns, then each candidate's verdict
    header = next(line for line in text.splitlines() if line.startswith("set  output"))
    assert header.split()[2:] == [f"#{i}" for i in range(6)]
    assert "#4 buggy.onnx (CPU, disable): FAIL" in text
    assert text.strip().splitlines()[-1].startswith("FAIL: 2 of 6 fail")


def test_the_reference_runs_once_per_input_set_and_a_shared_file_loads_once(exports: Exports):
    base = default_loaders()
    loaded: list[str] = []
    forwards: list[int] = []

    def load_onnx(path):
        loaded.append(Path(path).name)
        return base.load_onnx(path)

    def load_torch_model(spec, *, weights=None, **kwargs):
        model = base.load_torch_model(spec, weights=weights, **kwargs)
        model.module.register_forward_hook(lambda *_: forwards.append(1))
        return model

    loaders = replace(base, load_onnx=load_onnx, load_torch_model=load_torch_model)
    config = RunConfig(
        model=f"{exports.models}:make",
        onnx=(str(exports.dynamo), str(exports.legacy)),
        ort_opt_level=("disable", "basic", "all"),
        n_input_sets=3,
    )
    run = run_validation(config, loaders=loaders)
    assert len(run.candidates) == 6 and run.verdict == "pass"
    assert len(forwards) == 3  # once per input set, not once per candidate
    assert sorted(loaded) == ["dynamo.onnx", "legacy.onnx"]  # each file read once
    assert len(run.onnx_outputs) == 6 * 3
    view = run.for_candidate(4)
    assert view.onnx == str(exports.legacy) and len(view.comparisons) == 3 * 2
    # each candidate's outputs: one OutputSet per input set, the arrays behind its comparisons
    for info in run.infos:
        outputs = run.candidate(info.index).onnx_outputs
        assert len(outputs) == len(run.input_sets) == 3
        for c in run.candidate(info.index).outputs:
            position = [s.index for s in run.input_sets].index(c.input_set)
            assert run.arrays(c)[1] is outputs[position].arrays[c.name]
    mine = run.candidate(4).onnx_outputs
    same = zip(view.onnx_outputs, mine, view.candidate(4).onnx_outputs, strict=True)
    assert all(a is b is c for a, b, c in same)
    assert not any(a is b for a, b in zip(mine, run.candidate(0).onnx_outputs, strict=True))
    with pytest.raises(KeyError):
        run.candidate(6)
    assert view.provenance.ort_opt_level == "basic"


def test_fp16_export_is_judged_against_its_fp32_export_onnx_against_onnx(
    exports: Exports, tmp_path: Path, capsys
):
    out = tmp_path / "r.json"
    args = ["validate", "--onnx", str(exports.legacy), "--onnx", str(exports.fp16)]
    assert main([*args, "--json", str(out)]) == 1  # fp16 is not within 1e-5 of fp32
    text = capsys.readouterr().out
    report = _report(out)
    assert report["reference"] == {
        "kind": "onnx",
        "onnx": str(exports.legacy),
        "provider": "CPUExecutionProvider",
        "ort_opt_level": "all",
    }
    assert report["model"] == f"onnx:{exports.legacy}"
    (candidate,) = report["candidates"]
    assert candidate["onnx"] == str(exports.fp16) and candidate["verdict"] == "fail"
    assert any("float16" in note for note in candidate["notes"])
    worst = max(r["max_abs"] for r in report["outputs"])
    assert 1e-5 < worst < 1e-2  # half precision's error, measured (not a dtype mismatch)
    assert all(r["status"] == "fail" and r["onnx_dtype"] == "float32" for r in report["outputs"])
    assert text.startswith(f"reference {exports.legacy} (CPUExecutionProvider, all)")
    assert main([*args, "--atol", "1e-2"]) == 0


def test_one_file_at_two_levels_compares_the_optimised_graph_with_the_unoptimised(
    exports: Exports,
):
    run = run_validation(
        RunConfig(model=None, onnx=str(exports.dynamo), ort_opt_level=("disable", "all"))
    )
    assert run.provenance.reference_opt_level == "disable"
    (candidate,) = run.infos
    assert candidate.ort_opt_level == "all" and run.verdict == "pass"


def test_a_candidate_that_cannot_run_is_an_error_and_the_others_are_still_reported(
    exports: Exports, tmp_path: Path, capsys
):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07not a protobuf" * 20)
    out = tmp_path / "r.json"
    code = main(
        [
            "validate", "--model", str(exports.pt2), "--onnx", str(exports.dynamo),
            "--onnx", str(corrupt), "--onnx", str(exports.renamed), "--json", str(out),
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2
    report = _report(out)
    assert report["verdict"] == "error"
    verdicts = [c["verdict"] for c in report["candidates"]]
    assert verdicts == ["pass", "error", "error"]
    assert "corrupt.onnx" in report["candidates"][1]["error"]
    assert report["candidates"][2]["error"].startswith("signature differs from the reference's")
    assert "'features'" in report["candidates"][2]["error"]
    assert {r["candidate"] for r in report["outputs"]} == {0}  # errors have no rows
    assert "corrupt.onnx" in captured.err and "Traceback" not in captured.err
    assert "#0 dynamo.onnx (CPU, all): PASS" in captured.out


def test_unavailable_provider_is_one_line_listing_the_available_ones(exports: Exports, capsys):
    code = main(
        ["validate", "--model", str(exports.pt2), "--onnx", str(exports.dynamo),
         "--provider", "CPUExecutionProvider,NoSuchExecutionProvider"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "'NoSuchExecutionProvider' not available here" in err
    assert "available: " in err and "CPUExecutionProvider" in err.split("available: ")[1]


@pytest.mark.parametrize(
    "extra, words",
    [
        ([], "needs a second candidate"),
        (["--ort-opt-level", "all,fastest"], "'fastest'"),
    ],
)
def test_onnx_against_onnx_usage_errors(exports: Exports, extra, words, capsys):
    code = main(["validate", "--onnx", str(exports.dynamo), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert words in err


def test_layers_with_several_candidates_is_refused(exports: Exports, capsys):
    code = main(
        ["validate", "--model", str(exports.pt2), "--onnx", str(exports.dynamo),
         "--onnx", str(exports.legacy), "--layers"]
    )  # fmt: skip
    assert code == 2 and "--layers compares one ONNX file" in capsys.readouterr().err


def test_single_candidate_report_names_its_one_candidate(exports: Exports, tmp_path: Path):
    out = tmp_path / "r.json"
    assert main(["validate", "--model", str(exports.pt2), "--onnx", str(exports.legacy),
                 "--json", str(out)]) == 0  # fmt: skip
    report = _report(out)
    assert [c["verdict"] for c in report["candidates"]] == ["pass"]
    assert report["candidates"][0]["onnx"] == report["onnx"] == str(exports.legacy)
    assert {r["candidate"] for r in report["outputs"]} == {0}
    assert "reference" not in report


def test_saved_run_and_parity_report_keep_every_candidate(exports: Exports, tmp_path: Path, capsys):
    saved = tmp_path / "run.parity.npz"
    main(
        ["validate", "--model", str(exports.pt2), "--onnx", str(exports.dynamo),
         "--onnx", str(exports.buggy), "--save-run", str(saved)]
    )  # fmt: skip
    capsys.readouterr()
    out = tmp_path / "r.json"
    assert main(["report", str(saved), "--atol", "0.1", "--json", str(out)]) == 0
    report = _report(out)
    assert [Path(c["onnx"]).name for c in report["candidates"]] == ["dynamo.onnx", "buggy.onnx"]
    assert [c["verdict"] for c in report["candidates"]] == ["pass", "pass"]
    assert main(["report", str(saved), "--json", str(out)]) == 1
    assert [c["verdict"] for c in _report(out)["candidates"]] == ["pass", "fail"]


def _by_arithmetic(run: ValidationRun, k: int) -> tuple[tuple, tuple]:
    """Candidate k's rows and output sets as readers used to find them: rows by their
    `candidate`, output sets at [k * n, (k + 1) * n) of `onnx_outputs`."""
    info = run.infos[k]
    n = len(run.input_sets)
    rows = tuple(c for c in run.outputs if c.candidate == info.index)
    return rows, run.onnx_outputs[k * n : (k + 1) * n]


def test_each_candidate_view_has_its_own_rows_and_outputs_live_and_reopened(
    exports: Exports, tmp_path: Path
):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07not a protobuf" * 20)
    config = RunConfig(
        model=str(exports.pt2),
        onnx=(str(exports.dynamo), str(exports.buggy), str(corrupt)),
        n_input_sets=2,
    )
    run = run_validation(config)
    assert run.comparisons is run.outputs  # the deprecated alias is the same tuple
    views = run.candidates
    assert views is run.candidates  # built once per run
    assert [v.index for v in views] == [0, 1, 2]
    assert [v.verdict for v in views] == ["pass", "fail", "error"]
    assert [v.passed for v in views] == [True, False, False]
    assert views[0].failing == () and views[1].failing == ("logits", "total") == run.failing
    assert views[2].outputs == () and all(not s.arrays for s in views[2].onnx_outputs)
    for k, view in enumerate(views):
        rows, sets = _by_arithmetic(run, k)
        assert view is run.candidate(view.index) and view.info is run.infos[k]
        assert view.outputs == rows and len(view.onnx_outputs) == 2
        assert all(a is b for a, b in zip(view.onnx_outputs, sets, strict=True))  # not copied
        assert {c.candidate for c in view.outputs} <= {view.index}
    assert views[0].outputs and views[1].outputs
    assert views[0].onnx_outputs[0] is not views[1].onnx_outputs[0]

    path = save_run(run, tmp_path / "run.parity.npz")
    reopened = load_run(path)
    assert reopened.comparisons is reopened.outputs
    again = reopened.candidates
    assert [v.verdict for v in again] == ["pass", "fail", "error"]
    for k, (live, back) in enumerate(zip(views, again, strict=True)):
        rows, sets = _by_arithmetic(reopened, k)
        assert back.outputs == rows and all(
            a is b for a, b in zip(back.onnx_outputs, sets, strict=True)
        )
        assert [(c.input_set, c.name, c.status) for c in back.outputs] == [
            (c.input_set, c.name, c.status) for c in live.outputs
        ]
        for old, new in zip(live.onnx_outputs, back.onnx_outputs, strict=True):
            assert old.arrays.keys() == new.arrays.keys()
            assert all(np.array_equal(old.arrays[n], new.arrays[n]) for n in old.arrays)
    loose = reopened.rejudge(atol=0.1)
    assert [v.verdict for v in loose.candidates] == ["pass", "pass", "error"]
    assert reopened.candidate(1).verdict == "fail"  # rejudge makes a new run and new views


@pytest.fixture(scope="module")
def side_by_side(exports: Exports, tmp_path_factory: pytest.TempPathFactory):
    """dynamo, buggy and a legacy copy whose file name is markup, at two levels, 2 sets."""
    odd = tmp_path_factory.mktemp("odd") / "<i>odd.onnx"
    odd.write_bytes(exports.legacy.read_bytes())
    config = RunConfig(
        model=str(exports.pt2),
        onnx=(str(exports.dynamo), str(exports.buggy), str(odd)),
        ort_opt_level=("disable", "all"),
        n_input_sets=2,
    )
    return run_validation(config)


def test_html_report_shows_candidates_table_grid_and_each_failing_candidate(side_by_side):
    from parity.reports.html_report import figure_count, render_html_report

    page = render_html_report(side_by_side)
    assert "<h2>Candidates</h2>" in page and "Outputs × candidates" in page
    assert page.count("<h2 class='candidate fail'>") == 2  # buggy at both levels, nothing else
    assert "Candidate #2 buggy.onnx (CPU, disable): FAIL" in page
    assert "&lt;i&gt;odd.onnx" in page and "<i>odd" not in page
    assert page.count("class='fig ") == figure_count(side_by_side)
    # the grid; 2 failing candidates x 2 outputs x (heatmap, histogram, where profile)
    assert figure_count(side_by_side) == 1 + 2 * 2 * 3


def test_candidates_grid_marks_each_candidate_and_output(side_by_side):
    from parity.show.candidate_figures import candidates_grid

    fig = candidates_grid(side_by_side)
    marks = fig.data[1]
    cells = {(int(c[0]), str(c[1])): m for c, m in zip(marks.customdata, marks.text, strict=True)}
    assert len(cells) == 6 * 2
    assert {cells[(k, "logits")] for k in (2, 3)} == {"✗"}
    assert {cells[(k, n)] for k in (0, 1, 4, 5) for n in ("logits", "total")} == {"✓"}
    assert "&lt;i&gt;odd" in fig.layout.yaxis.categoryarray[4]


def test_candidates_grid_colours_cells_on_the_judgement_scale(side_by_side):
    """Issue 22: the grid's colour is worst error ÷ allowed (parity.judge.ratio), the
    scale of every other grid: a passing cell is on the green side, a failing one red."""
    from parity.show.candidate_figures import candidates_grid
    from parity.show.candidate_views import candidate_cells
    from parity.show.colors import RATIO_SPAN, cell_look

    fig = candidates_grid(side_by_side)
    heat = fig.data[0]
    assert (heat.zmin, heat.zmax) == (-RATIO_SPAN, RATIO_SPAN)
    assert heat.colorbar.title.text == "error ÷ allowed"
    assert "log10" not in fig.layout.title.text
    rows, columns = list(heat.y), list(heat.x)
    seen = 0
    for cell in candidate_cells(side_by_side):
        i = next(k for k, r in enumerate(rows) if r.startswith(f"#{cell.candidate.index} "))
        z = heat.z[i][columns.index(cell.name)]
        assert z == cell_look(cell.worst).z
        assert (z < 0) == cell.worst.status.passed
        seen += 1
    assert seen == 6 * 2


def test_a_failing_sentence_names_its_candidate_and_counts_its_own_sets(side_by_side):
    """Issue 22: in a run with several candidates a verdict sentence says which file,
    provider and level fails, and counts that candidate's input sets only."""
    from parity.show.sentences import failing_outputs, output_facts

    failing = failing_outputs(side_by_side)
    assert sorted((c.candidate, c.name) for c in failing) == [
        (2, "logits"), (2, "total"), (3, "logits"), (3, "total")
    ]  # fmt: skip
    by = {
        c.candidate: output_facts(side_by_side, c, None).text()
        for c in failing
        if c.name == "logits"
    }
    assert by[2].startswith("logits fails in 2 of 2 input sets on #2 buggy.onnx (CPU, disable).")
    assert by[3].startswith("logits fails in 2 of 2 input sets on #3 buggy.onnx (CPU, all).")
    single = side_by_side.for_candidate(2)
    alone = {c.name: output_facts(single, c, None).text() for c in failing_outputs(single)}
    assert alone["logits"].startswith(
        "logits fails in 2 of 2 input sets. Out of tolerance in set"
    )  # no "on #"


def test_rejudged_run_judges_every_candidate(side_by_side):
    from parity.tolerances import Tolerance, Tolerances

    loose = side_by_side.rejudge(Tolerances(default=Tolerance(atol=0.1, rtol=0.0)))
    assert loose.verdict == "pass"
    assert [v.verdict for v in loose.candidates] == ["pass"] * 6
    assert side_by_side.candidate(2).verdict == "fail"


def test_the_dashboard_rerun_opens_no_session_again(exports: Exports, monkeypatch):
    """Issue 62 ("Start"): with the dashboard's loaders each candidate's session is opened
    once in this process and probed once in a forked child (parity.load.sessions); the same
    run again, as the Run page's button does, opens and probes none."""
    from parity.dashboard import state
    from parity.load import onnx_model, sessions

    opened: list[tuple[str, str]] = []
    probed: list[tuple[str, str]] = []
    real_open, real_probe = onnx_model.open_session, sessions._probe

    def open_counted(path, **kwargs):
        opened.append((Path(path).name, kwargs["opt_level"]))
        return real_open(path, **kwargs)

    def probe_counted(path: str, provider: str, opt_level: str) -> str | None:
        probed.append((Path(path).name, opt_level))
        return real_probe(path, provider, opt_level)

    monkeypatch.setattr(onnx_model, "open_session", open_counted)
    monkeypatch.setattr(sessions, "_probe", probe_counted)
    monkeypatch.setattr(sessions, "_probed", {})  # what earlier tests probed: probed again
    state._session.clear()
    config = RunConfig(
        model=str(exports.pt2),  # not code: the dashboard runs it untrusted
        onnx=(str(exports.dynamo), str(exports.legacy)),
        ort_opt_level=("disable", "all"),
        n_input_sets=1,
    )
    each = sorted((f, lv) for f in ("dynamo.onnx", "legacy.onnx") for lv in ("disable", "all"))
    first = run_validation(config, loaders=state.cached_loaders())
    assert first.verdict == "pass" and len(first.candidates) == 4
    assert sorted(opened) == sorted(probed) == each  # once in process, once in the child
    second = run_validation(config, loaders=state.cached_loaders())
    assert second.verdict == "pass" and len(second.candidates) == 4
    assert sorted(opened) == sorted(probed) == each  # the re-run: neither again
