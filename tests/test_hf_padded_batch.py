"""A decoder file with no position_ids, run on the prompts as one left-padded batch (issue 60).

Such a file's steps are compared one prompt at a time (torch's cache of a left-padded batch
does not fit it); the batch generate() makes is run beside, the file on its own cache.
Three real Optimum exports of tiny random-weight models:
- Gemma (Optimum's own config: no position_ids; rotary positions, so a constant shift per
  row changes nothing): the batch gives each prompt what it gives alone, the run passes;
- GPT-2 through a custom Optimum config that leaves position_ids out (learned absolute
  positions): the padded prompt is wrong in the batch while each prompt alone matches, so
  the run fails with a `limitation` finding, by tolerance and by cause;
- Llama (position_ids in the file): the steps are the batch itself, nothing else is run.
Each figure Parity reports is checked against a plain ONNX Runtime loop written here over
transformers' own generate() logits.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import transformers

from parity.cli import main
from parity.pipeline import RunConfig, run_validation
from parity.reports.saved_run import load_run
from parity.results import FindingKind, Status
from parity.run.hf_options import HfOptions
from parity.verdict import Judge, Verdict
from tests.helpers.hf_models import PROMPTS, SPECIAL, make_gemma_dir, make_gpt2_dir
from tests.helpers.hf_tasks import optimum_export, optimum_export_without_positions

pytestmark = pytest.mark.slow  # exports three transformers models

N_NEW = 4
LIMIT = "This file cannot serve left-padded batches"


@pytest.fixture(scope="module")
def exports(llama_dir, tmp_path_factory) -> dict[str, tuple[str, Path]]:
    root = tmp_path_factory.mktemp("padded_batch")
    gemma = make_gemma_dir(root / "gemma")
    gpt2 = make_gpt2_dir(root / "gpt2")
    task = "text-generation-with-past"
    return {
        "gemma": (gemma, optimum_export(gemma, root / "gemma_onnx", task)),
        "gpt2": (gpt2, optimum_export_without_positions(gpt2, root / "gpt2_onnx")),
        "llama": (llama_dir, optimum_export(llama_dir, root / "llama_onnx", task)),
    }


def _config(model_dir: str, onnx_path: Path) -> RunConfig:
    options = HfOptions(prompts=PROMPTS, max_new_tokens=N_NEW)
    return RunConfig(model=f"hf:{model_dir}", onnx=str(onnx_path), hf=options)


@pytest.fixture(scope="module")
def runs(exports):
    return {name: run_validation(_config(*exports[name])) for name in ("gemma", "llama")}


@pytest.fixture(scope="module")
def gpt2(exports, tmp_path_factory) -> dict:
    """The failing file through the command line: exit code, JSON, saved run, HTML."""
    model_dir, onnx_path = exports["gpt2"]
    out = tmp_path_factory.mktemp("gpt2_out")
    argv = ["validate", "--model", f"hf:{model_dir}", "--onnx", str(onnx_path)]
    argv += ["--max-new-tokens", str(N_NEW)] + [a for p in PROMPTS for a in ("--prompt", p)]
    argv += ["--json", str(out / "r.json"), "--save-run", str(out / "r.parity.npz")]
    argv += ["--html", str(out / "r.html")]
    code = main(argv)
    return {
        "code": code,
        "json": json.loads((out / "r.json").read_text()),
        "run": load_run(out / "r.parity.npz"),
        "saved": str(out / "r.parity.npz"),
        "html": (out / "r.html").read_text(),
    }


def plain_batch_errors(model_dir: str, onnx_path: Path) -> np.ndarray:
    """Per prompt, max |ONNX - torch| of the last logits over N_NEW steps: transformers'
    greedy generate() on the left-padded batch (its per-step logits), the file run by plain
    ONNX Runtime on its own cache (present fed back as past, the mask grown by one) and fed
    torch's tokens. Independent of Parity."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    encoded = tokenizer(list(PROMPTS), return_tensors="pt", padding=True)
    with torch.inference_mode():
        made = model.generate(
            **encoded,
            max_new_tokens=N_NEW,
            min_new_tokens=N_NEW,
            do_sample=False,
            num_beams=1,
            pad_token_id=SPECIAL["pad_token_id"],
            output_logits=True,
            return_dict_in_generate=True,
        )
    tokens = made.sequences[:, encoded["input_ids"].shape[1] :].numpy()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    batch = len(PROMPTS)
    feeds = {name: encoded[name].numpy() for name in ("input_ids", "attention_mask")}
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):
            _, heads, _, size = i.shape  # [batch, heads, past, head size]
            feeds[i.name] = np.zeros((batch, heads, 0, size), np.float32)
    errors = np.zeros(batch)
    for step in range(N_NEW):
        got = dict(zip(names, session.run(names, feeds), strict=True))
        diff = np.abs(got["logits"][:, -1, :] - made.logits[step].numpy()).max(axis=-1)
        errors = np.maximum(errors, diff)
        mask = np.concatenate([feeds["attention_mask"], np.ones((batch, 1), np.int64)], axis=1)
        feeds = {"input_ids": tokens[:, step : step + 1], "attention_mask": mask} | {
            n.replace("present.", "past_key_values."): v
            for n, v in got.items()
            if n.startswith("present.")
        }
    return errors


def test_optimum_gemma_has_no_position_ids_and_serves_the_batch_on_its_own_cache(
    exports, runs
) -> None:
    run = runs["gemma"]
    assert "position_ids" not in run.signature.input_names
    assert run.verdict is Verdict.PASS, [f.text for f in run.findings]
    assert {s.batch for s in run.generation.steps} == {1}  # the steps: each prompt alone
    padded = run.generation.padded_batch
    assert padded is not None and padded.kind is None and not padded.fails
    assert padded.steps == N_NEW and [p.prompt for p in padded.prompts] == list(PROMPTS)
    assert padded.prompts[0].padding == 0 and padded.prompts[1].padding > 0
    assert all(p.batch_passed and p.alone_passed for p in padded.prompts)
    plain = plain_batch_errors(*exports["gemma"])
    assert plain.max() < 1e-5  # the premise: on its own cache the batch is right
    for p, expected in zip(padded.prompts, plain, strict=True):
        assert p.batch_error == pytest.approx(expected, abs=1e-6)
    assert not any(f.kind is FindingKind.LIMITATION for f in run.findings)
    assert "gives each prompt what it gives it alone" in padded.text


def test_a_gpt2_export_without_position_ids_cannot_serve_a_left_padded_batch(exports, gpt2) -> None:
    assert gpt2["code"] == 1
    run = gpt2["run"]
    assert "position_ids" not in run.signature.input_names
    # every step of each prompt alone passes: only the batch fails the run
    assert all(c.status is Status.PASS for c in run.outputs)
    assert run.failing == ("logits",) and run.verdict is Verdict.FAIL
    padded = run.generation.padded_batch
    assert padded is not None and padded.kind is FindingKind.LIMITATION
    first, second = padded.prompts
    assert first.padding == 0 and first.batch_passed
    assert second.padding > 0 and not second.batch_passed
    plain = plain_batch_errors(*exports["gpt2"])
    assert plain[0] < 1e-5 < 1e-2 < plain[1]  # the premise: only the padded prompt is off
    assert second.batch_error == pytest.approx(plain[1], rel=1e-4)
    assert second.shift > 1e-2 and second.alone_error < 1e-5
    (found,) = [f for f in run.findings if f.kind is FindingKind.LIMITATION]
    assert found.output == "logits" and found.text.startswith(LIMIT)
    assert "numbers positions from the past length" in found.text
    assert "each prompt alone matches torch (max " in found.text
    assert repr(PROMPTS[1]) in found.text
    # the JSON's finding and its record; the HTML report says both
    findings = gpt2["json"]["findings"]
    assert {"kind": "limitation", "output": "logits", "candidate": None, "text": found.text} in (
        findings
    )
    assert gpt2["json"]["generation"]["padded_batch"]["kind"] == "limitation"
    assert gpt2["json"]["verdict"] == "fail"
    assert "Left-padded batch" in gpt2["html"] and LIMIT in gpt2["html"]
    # no "--layers" or "--noise-floor" hint: they would measure the steps, which pass
    assert not any(f.kind is FindingKind.UNMEASURED for f in run.findings)


def test_the_verdict_by_cause_fails_on_the_limitation(gpt2) -> None:
    from parity.show.cause import cause_line, judge_by_cause

    run = dataclasses.replace(gpt2["run"], judge=Judge.CAUSE)
    judged = judge_by_cause(run)
    assert judged.verdict is Verdict.FAIL and not judged.unexplained
    assert [f.kind for f in judged.failing] == [FindingKind.LIMITATION]
    assert cause_line(run) == "FAIL by cause: a limitation (logits)"


def test_a_llama_with_position_ids_runs_the_batch_as_its_steps(runs) -> None:
    run = runs["llama"]
    assert "position_ids" in run.signature.input_names
    assert run.verdict is Verdict.PASS
    assert {s.batch for s in run.generation.steps} == {len(PROMPTS)}  # left-padded batch
    assert run.generation.padded_batch is None


def test_the_terminal_and_the_pages_say_the_batch(gpt2, runs) -> None:
    from streamlit.testing.v1 import AppTest

    from parity.hf.steps_text import format_steps_table
    from parity.show.format import format_verdict
    from parity.show.summary import headline

    run = gpt2["run"]
    text = format_steps_table(run)
    assert "Left-padded batch: the file has no position_ids" in text
    assert "prompts:   2 (each alone, then as one left-padded batch)" in text
    second = run.generation.padded_batch.prompts[1]
    assert f"{PROMPTS[1]!r}: {second.padding} padding tokens: logits max" in text
    assert format_verdict(run).startswith("FAIL: every step within tolerance")
    assert headline(run) == (
        "The export does not match PyTorch: its logits differ when the prompts run as one "
        "left-padded batch."
    )
    passing = format_steps_table(runs["gemma"])
    assert "gives each prompt what it gives it alone" in passing

    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=180)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page("pages/generation.py").run()
    assert not at.exception, at.exception
    assert "Left-padded batch" in [h.value for h in at.subheader]
    frame = at.dataframe[-1].value
    frame = frame.data if hasattr(frame, "data") else frame
    assert frame["same as alone"].tolist() == ["✓", "✗"]
    assert any(t.value.startswith(LIMIT) for t in at.text)
    at.switch_page("pages/overview.py").run()
    assert not at.exception, at.exception
    assert any(LIMIT in m.value.replace("\\", "") for m in at.markdown)  # escaped markdown


def test_a_file_that_takes_one_prompt_at_a_time_says_why_no_batch_ran(exports, tmp_path) -> None:
    """The GPT-2 file with its batch fixed at 1: ONNX Runtime refuses the batch; the steps
    (each prompt alone) decide, and the batch's line says why it was not run."""
    model_dir, onnx_path = exports["gpt2"]
    model = onnx.load(str(onnx_path))
    for graph_input in model.graph.input:
        graph_input.type.tensor_type.shape.dim[0].dim_value = 1
    one = tmp_path / "batch_one.onnx"
    onnx.save(model, str(one))
    run = run_validation(_config(model_dir, one))
    assert run.verdict is Verdict.PASS
    padded = run.generation.padded_batch
    assert padded is not None and not padded.prompts and not padded.fails
    assert padded.text.startswith("The prompts as one left-padded batch were not run: ")
    assert "input_ids" in padded.text


def test_the_batch_is_judged_again_at_the_tolerances_a_run_is_rejudged_at(gpt2, tmp_path) -> None:
    """`parity report RUN --tol`, run.rejudge and the dashboard's tolerances judge the batch
    again from the figures it kept (no model run): above the padded prompt's batch-vs-alone
    difference it passes with no limitation; back at the run's tolerances it fails as made."""
    from streamlit.testing.v1 import AppTest

    from parity.tolerances import Tolerance

    run = gpt2["run"]  # reopened from the saved run
    made = run.generation.padded_batch
    second = made.prompts[1]
    # the kept figures decide as the measured difference does (rtol 0: its largest |d|)
    assert not second.same_at(Tolerance(second.shift * 0.99, 0.0))
    assert second.same_at(Tolerance(second.shift * 1.01, 0.0))
    loose = f"logits={second.shift * 2:.6g}:0"

    out = tmp_path / "loose"
    argv = ["report", gpt2["saved"], "--tol", loose, "--json", str(out.with_suffix(".json"))]
    argv += ["--html", str(out.with_suffix(".html"))]
    code = main(argv)
    report = json.loads(out.with_suffix(".json").read_text())
    assert code == 0 and report["verdict"] == "pass"
    batch = report["generation"]["padded_batch"]
    assert batch["kind"] is None and [p["batch_passed"] for p in batch["prompts"]] == [True, True]
    assert not any(f["kind"] == "limitation" for f in report["findings"])
    html = out.with_suffix(".html").read_text()
    assert "Left-padded batch" in html and LIMIT not in html

    tolerances = run.tolerances.with_output("logits", Tolerance(second.shift * 2, 0.0))
    passed = run.rejudge(tolerances)
    assert passed.verdict is Verdict.PASS and passed.failing == ()
    assert passed.generation.padded_batch.kind is None
    assert "within the logits tolerance" in passed.generation.padded_batch.text
    assert not any(f.kind is FindingKind.LIMITATION for f in passed.findings)

    again = passed.rejudge(run.tolerances)  # back at the tolerances the run was made at
    assert again.verdict is Verdict.FAIL and again.failing == ("logits",)
    assert again.generation.padded_batch == made
    (found,) = [f for f in again.findings if f.kind is FindingKind.LIMITATION]
    assert found.text == made.text

    # the loosened run saved and reopened: as judged; re-judged at the original: the limitation
    reopened = load_run(passed.save(tmp_path / "passed.parity.npz"))
    assert reopened.verdict is Verdict.PASS and reopened.generation.padded_batch.kind is None
    assert reopened.rejudge(run.tolerances).generation.padded_batch == made

    # the dashboard at the loose tolerances: the Generation page shows both prompts the same
    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=180)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = tolerances
    at.switch_page("pages/generation.py").run()
    assert not at.exception, at.exception
    frame = at.dataframe[-1].value
    frame = frame.data if hasattr(frame, "data") else frame
    assert frame["same as alone"].tolist() == ["✓", "✓"]
    assert not any(t.value.startswith(LIMIT) for t in at.text)


def test_a_batch_saved_without_its_figures_keeps_its_verdict_when_rejudged(gpt2) -> None:
    """A run saved before the hull was kept (no `rule`, no `hull_*`): re-judged at any
    tolerance, its batch stays as it was judged (the figures to judge it again are not there)."""
    from parity.tolerances import Tolerance

    run = gpt2["run"]
    made = run.generation.padded_batch
    old = dataclasses.replace(
        made,
        rule="",
        prompts=tuple(dataclasses.replace(p, hull_ref=None, hull_diff=None) for p in made.prompts),
    )
    saved = dataclasses.replace(
        run, generation=dataclasses.replace(run.generation, padded_batch=old)
    )
    loose = saved.rejudge(saved.tolerances.with_output("logits", Tolerance(10.0, 0.0)))
    assert loose.generation.padded_batch == old and loose.verdict is Verdict.FAIL
