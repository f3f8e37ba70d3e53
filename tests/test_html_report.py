"""The HTML report opens offline in real headless Chromium: charts render, nothing is fetched."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from plotly.offline import get_plotlyjs

from parity.judge.compare import compare_outputs
from parity.reports.html_report import FIGURES_PER_FAILING_OUTPUT, figure_count, write_html_report
from parity.reports.saved_run import load_run, save_run
from parity.results import InputSet, OutputSet, ValidationRun
from parity.signature import OnnxSignature, TensorSpec
from parity.tolerances import Tolerance, Tolerances

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
EVIL_NAME = "<img src=http://example.invalid/x.png onerror=alert(1)>"


def build_run(pairs: dict[str, tuple[np.ndarray, np.ndarray]], *, n_sets: int = 1):
    tol = Tolerance(1e-4, 0.0)
    refs, onnxs, comps, sets = [], [], [], []
    for s in range(n_sets):
        sets.append(InputSet(s, {"x": np.zeros((1 + s, 3), np.float32)}, label=f"batch {1 + s}"))
        refs.append(OutputSet({n: r for n, (r, _) in pairs.items()}))
        onnxs.append(OutputSet({n: o for n, (_, o) in pairs.items()}))
        comps += [
            compare_outputs(r, o, name=n, input_set=s, tolerance=tol) for n, (r, o) in pairs.items()
        ]
    sig = OnnxSignature(
        inputs=(TensorSpec("x", "float32", ("batch", 3)),),
        outputs=tuple(TensorSpec(n, "float32", tuple(o.shape)) for n, (_, o) in pairs.items()),
        opset=18, producer="pytorch", ir_version=9,
    )  # fmt: skip
    return ValidationRun.from_rows(
        model="demo:test", onnx="model.onnx", signature=sig, tolerances=Tolerances(tol),
        environment={"onnxruntime": "1.32", "provider": "CPUExecutionProvider"},
        input_sets=tuple(sets), outputs=tuple(comps), ref_outputs=tuple(refs),
        onnx_outputs=tuple(onnxs),
    )  # fmt: skip


@pytest.fixture(scope="module")
def mixed_run() -> ValidationRun:
    """Two failing outputs (one 2048x2048 with a bad corner), one passing, one shape mismatch."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((2048, 2048)).astype(np.float32)
    big_onnx = big.copy()
    big_onnx[1500:1600, 100:200] += 0.5  # the region a reader must find on the heatmap
    small = rng.standard_normal((2, 8, 16)).astype(np.float32)
    ok = rng.standard_normal((4, 5)).astype(np.float32)
    return build_run(
        {
            "big": (big, big_onnx),
            EVIL_NAME: (small, small + 1e-2),
            "ok": (ok, ok + 1e-6),
            "reshaped": (ok, ok.reshape(5, 4)),
        },
        n_sets=2,
    )


def open_in_chromium(chromium, path: Path, expected_charts: int) -> dict:
    """Load the report from disk in a new context of the session's Chromium; return the
    requests it made and what rendered."""
    requests: list[str] = []
    errors: list[str] = []
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.add_init_script(
            "window.__violations = [];"
            "document.addEventListener('securitypolicyviolation',"
            " e => window.__violations.push(e.blockedURI));"
        )
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        page.wait_for_function(
            f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {expected_charts}",
            timeout=60_000,
        )
        page.wait_for_timeout(300)  # let any late request show up
        result = {
            "requests": requests,
            "errors": errors,
            "violations": page.evaluate("window.__violations"),
            "charts": page.locator(".js-plotly-plot").count(),
            "heatmap_traces": page.locator(".fig.heatmap .hm, .fig.heatmap image").count(),
            "title": page.title(),
            "text": page.inner_text("body"),
        }
    finally:
        context.close()
    return result


@pytest.mark.browser
def test_report_renders_offline_with_every_failing_outputs_figures(
    chromium, tmp_path: Path, mixed_run: ValidationRun
) -> None:
    path = write_html_report(mixed_run, tmp_path / "report.html")
    n_failing = 2  # "big" and the evil-named one; "reshaped" has no element-wise view
    expected = 1 + (FIGURES_PER_FAILING_OUTPUT + 1) * n_failing  # + grid, + where profiles
    assert figure_count(mixed_run) == expected

    seen = open_in_chromium(chromium, path, expected)

    assert seen["requests"] == [path.resolve().as_uri()], "the report fetched something"
    assert seen["violations"] == [] and seen["errors"] == []
    assert seen["charts"] == expected
    assert seen["heatmap_traces"] >= n_failing
    assert seen["title"].startswith("Parity report: fail")
    text = seen["text"]
    assert EVIL_NAME in text  # shown as text, never as markup
    assert "FAIL" in text and "shape mismatch" in text
    assert "block max-pooled" in text  # the big heatmap says it was reduced


def test_report_escapes_names_and_summarises_passing_outputs(
    tmp_path: Path, mixed_run: ValidationRun
) -> None:
    text = write_html_report(mixed_run, tmp_path / "r.html").read_text()
    assert EVIL_NAME not in text
    assert "&lt;img src=http://example.invalid/x.png" in text
    assert len(re.findall(r"<tr class='pass'><td>\d</td><td class='name'>ok</td>", text)) == 2
    failing_headers = re.findall(r"<article class='failing'><h3>([^<]*) <small>", text)
    assert sorted(failing_headers) == sorted(["big", "&lt;img src=http://example.invalid/x.png "
                                              "onerror=alert(1)&gt;", "reshaped"])  # fmt: skip
    assert "ok <small>" not in text


def test_report_size_stays_bounded_for_a_big_output(tmp_path: Path, mixed_run: ValidationRun):
    path = write_html_report(mixed_run, tmp_path / "r.html")
    figures_bytes = path.stat().st_size - len(get_plotlyjs().encode())
    assert 0 < figures_bytes < 1_500_000, f"{figures_bytes / 1e6:.2f} MB besides plotly.js"
    assert len(re.findall(r"Plotly v\d", path.read_text())) <= 2  # plotly.js inlined once


def test_worst_elements_table_points_at_the_broken_region(tmp_path: Path, mixed_run):
    text = write_html_report(mixed_run, tmp_path / "r.html").read_text()
    big_article = text[text.index("<h3>big <small>") :]
    big_article = big_article[: big_article.index("</article>")]
    rows = re.findall(r"<tr><td>\[(\d+), (\d+)\]</td>", big_article)
    assert rows, "no worst-element rows"
    for r, c in rows:
        assert 1500 <= int(r) < 1600 and 100 <= int(c) < 200


@pytest.mark.browser
def test_report_from_a_run_without_raw_outputs_says_heatmaps_are_omitted(
    chromium, tmp_path: Path, mixed_run: ValidationRun
) -> None:
    loaded = load_run(save_run(mixed_run, tmp_path / "r.parity.npz", keep_outputs=False))
    path = write_html_report(loaded, tmp_path / "r.html")
    assert figure_count(loaded) == 1
    seen = open_in_chromium(chromium, path, 1)
    assert seen["charts"] == 1
    assert seen["requests"] == [path.resolve().as_uri()]
    assert "kept no raw outputs" in seen["text"]


def test_report_of_a_passing_run_has_no_failing_section(tmp_path: Path) -> None:
    a = np.ones((3, 3), np.float32)
    run = build_run({"y": (a, a)})
    text = write_html_report(run, tmp_path / "r.html").read_text()
    assert run.verdict == "pass"
    assert "Failing outputs" not in text and "What we found" not in text
    assert (
        "The export matches PyTorch: the one output agrees within the allowed error on 1 " in text
    )


def test_report_of_a_saved_run_equals_report_of_the_live_run(tmp_path: Path, mixed_run):
    loaded = load_run(save_run(mixed_run, tmp_path / "r.parity.npz"))
    loaded = replace(loaded, saved=None)  # the saved-run path is shown in the header; drop it
    live = write_html_report(mixed_run, tmp_path / "live.html").read_text()
    again = write_html_report(loaded, tmp_path / "saved.html").read_text()

    def strip(t: str) -> str:  # figure div ids and the footer's time differ per render
        t = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "ID", t)
        return re.sub(r"on \d{4}-\d\d-\d\d \d\d:\d\d UTC", "", t)

    assert strip(live) == strip(again)


def test_many_failing_outputs_are_capped_worst_first(tmp_path: Path) -> None:
    from parity.reports.html_report import MAX_DETAILED_OUTPUTS

    a = np.linspace(1, 2, 12, dtype=np.float32).reshape(3, 4)
    n = MAX_DETAILED_OUTPUTS + 6
    run = build_run({f"out{i:02d}": (a, a + 1e-3 * (i + 1)) for i in range(n)})
    text = write_html_report(run, tmp_path / "r.html").read_text()
    assert figure_count(run) == 1 + (FIGURES_PER_FAILING_OUTPUT + 1) * MAX_DETAILED_OUTPUTS
    headers = re.findall(r"<article class='failing'><h3>([^<]*) <small>", text)
    assert headers[0] == f"out{n - 1:02d}"  # the largest error comes first
    assert len(headers) == MAX_DETAILED_OUTPUTS
    assert "6 more failing outputs" in text and "out00" in text.split("more failing outputs")[1]


def test_report_says_the_verdict_then_findings_then_numbers_then_technical_notes(
    tmp_path: Path, mixed_run: ValidationRun
) -> None:
    """A stakeholder reads the verdict in words first, then what is known about why; the
    numbers (and the allowed error's multiples) come after, the tolerances and the way the
    inputs were fed last (issue 37)."""
    text = write_html_report(mixed_run, tmp_path / "r.html").read_text()
    headline = text.index("The export does not match PyTorch: 3 of ")
    findings = text.index("<ul class='findings'>")
    numbers = text.index("<h2>In numbers")
    times = text.index("times the allowed error")
    notes = text.index("<h2>Technical notes")
    atol = text.index("Each element passes when |ONNX \u2212 reference| \u2264 atol")
    assert headline < findings < numbers < times < notes < atol
    assert "atol" not in text[text.index("<body>") : numbers]  # no jargon before the numbers
    found = re.findall(r"<li[^>]*>(.*?)</li>", text[findings : text.index("</ul>", findings)])
    # where the mismatches lie is said once, in the numbers (parity.show.sentences)
    assert "all 10,000 mismatches lie" in text[numbers:notes]
    assert any(
        line.startswith("Not measured in this run: where inside the model") for line in found
    )


def test_report_leads_with_one_sentence_per_failing_output_and_ends_with_files(
    tmp_path: Path, mixed_run: ValidationRun
) -> None:
    text = write_html_report(mixed_run, tmp_path / "r.html").read_text()
    start = text.index("<h2>In numbers")
    section = text[start : text.index("</section>", start)]
    heads = re.findall(r"<li><b>(.*?)</b>", section)
    assert len(heads) == 3  # the evil name, big, reshaped (worst first): before any section
    facts = {  # per output, its lines: one fact each
        h: re.findall(r"<li>([^<]*)</li>", part)
        for h, part in zip(heads, section.split("<li><b>")[1:], strict=True)
    }
    big = next(h for h in heads if h.startswith("big "))
    assert big == "big fails in 2 of 2 input sets"
    count, worst, where, *others = facts[big]  # then what the other failing set says
    assert count.startswith("Out of tolerance in set 0: 10,000 of 4,194,304 elements")
    assert re.fullmatch(  # in the output's own units, then in units of the allowed error
        r"Worst: off by 0\.5 \(reference [\d.]+, ONNX [\d.]+\), 5,000 times the allowed error",
        worst,
    )
    assert where.startswith("Where: all 10,000 mismatches lie where indices {1500..1599} of")
    assert (
        "Shape in set" in facts[heads[2]][0]
        and "(4, 5) in the reference, (5, 4) in ONNX" in (facts[heads[2]][0])
    )
    assert any("every judged element mismatches (256 mismatches)" in x for x in facts[heads[0]])
    order = [text.index(h) for h in ("<ul class='lead'>", "<h2>Input sets", "<h2>Outputs",
                                     "<h2>Failing outputs", "<h2>Tolerances", "<h2>Files",
                                     "<h2>Environment")]  # fmt: skip
    assert order == sorted(order)  # hashes and timings after the results
    assert "<p class='where'><b>Where:</b> all 10,000 mismatches" in text


@pytest.mark.browser
def test_report_numbers_never_wrap_mid_token_in_a_narrow_window(
    chromium, tmp_path: Path, mixed_run
):
    path = write_html_report(mixed_run, tmp_path / "r.html")
    context = chromium.new_context(viewport={"width": 700, "height": 900})
    try:
        page = context.new_page()
        page.goto(path.resolve().as_uri())
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 3")
        # every number-like token (1.00e-05, 4.19e+06, 10,000, (12.1%), 0.481) of the lead
        # sentences and the tables lies on one line: one client rect per token
        broken = page.evaluate(
            """() => {
              const out = [];
              const re = /[-+(]?[0-9][0-9.,]*(e[-+][0-9]+)?[%×)]?/g;
              const nodes = document.querySelectorAll('ul.lead li, td');
              for (const el of nodes) {
                const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
                let node;
                while ((node = walker.nextNode())) {
                  for (const m of node.data.matchAll(re)) {
                    const r = document.createRange();
                    r.setStart(node, m.index);
                    r.setEnd(node, m.index + m[0].length);
                    const lines = new Set([...r.getClientRects()].map(q => Math.round(q.top)));
                    if (lines.size > 1) out.push(m[0]);
                  }
                }
              }
              return out;
            }"""
        )
        page.screenshot(path=str(ARTIFACTS / "html-report-narrow.png"), full_page=False)
    finally:
        context.close()
    assert broken == []


@pytest.mark.browser
def test_a_candidates_notes_wrap_inside_the_page(chromium, tmp_path: Path) -> None:
    """Two float16 files side by side: the candidates table's notes (ONNX Runtime's float32
    fallback, a long sentence) wrap in their column; the table never widens the page."""
    from parity.cli import main
    from parity.load.demos import SHIPPED_DIR

    fp16 = next(Path(SHIPPED_DIR).glob("fp16-*.onnx"))
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(fp16.read_bytes())
    report = tmp_path / "r.html"
    args = ["validate", "--model", "demo:fp16", "--onnx", str(fp16), "--onnx", str(copy)]
    main([*args, "--input-sets", "1", "--html", str(report)])
    assert "float16 nodes in float32" in report.read_text()  # the premise: a long note
    context = chromium.new_context(viewport={"width": 1100, "height": 800})
    try:
        page = context.new_page()
        page.goto(report.resolve().as_uri())
        page.locator("table.candidates").wait_for()
        wide = page.evaluate("document.documentElement.scrollWidth")
    finally:
        context.close()
    assert wide <= 1100, wide
