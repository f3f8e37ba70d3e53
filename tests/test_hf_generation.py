"""Free-running generation (issue 40): after the steps, ONNX Runtime generates greedily on its
own, and each prompt's tokens are checked against transformers' greedy generate() and a plain
ONNX Runtime greedy loop written here (independent of Parity). A tiny random-weight Llama,
exported by Optimum (and by Parity itself); one planted bug: layer 1's MLP down projection
tripled in the ONNX file's initializer.
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
from onnx import numpy_helper

from parity.cli import main
from parity.hf.generation import divergence
from parity.pipeline import RunConfig, run_validation
from parity.results import PromptGeneration, TokenDivergence
from parity.run.hf_options import HfOptions
from parity.tolerances import Tolerance, Tolerances
from tests.helpers.hf_models import PROMPTS, SPECIAL
from tests.helpers.hf_tasks import optimum_export

pytestmark = pytest.mark.slow  # exports transformers models

N_NEW = 8
EOS = SPECIAL["eos_token_id"]
BUG_NODE = "/model/layers.1/mlp/down_proj/MatMul"


@pytest.fixture(scope="module")
def files(llama_dir, tmp_path_factory) -> dict[str, Path]:
    """Optimum's export of the tiny Llama, and a copy with layer 1's MLP weight tripled."""
    root = tmp_path_factory.mktemp("llama_generation")
    clean = optimum_export(llama_dir, root / "optimum", "text-generation-with-past")
    model = onnx.load(str(clean))
    node = next(n for n in model.graph.node if n.name == BUG_NODE)
    weight = next(i for i in model.graph.initializer if i.name == node.input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 3, weight.name))
    bug = root / "bug.onnx"
    onnx.save(model, str(bug))
    return {"clean": clean, "bug": bug}


def _run(llama_dir: str, onnx_path: Path | None, **config):
    options = HfOptions(prompts=PROMPTS, max_new_tokens=N_NEW)
    return run_validation(
        RunConfig(
            model=f"hf:{llama_dir}",
            onnx=None if onnx_path is None else str(onnx_path),
            hf=options,
            **config,
        )
    )


@pytest.fixture(scope="module")
def runs(llama_dir, files):
    return {name: _run(llama_dir, path) for name, path in files.items()}


@pytest.fixture(scope="module")
def torch_side(llama_dir):
    """transformers' own greedy generate() on the same left-padded batch: new tokens, and
    the model and tokenizer for forwards on a prefix."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(llama_dir)
    tokenizer.padding_side = "left"
    model = transformers.LlamaForCausalLM.from_pretrained(llama_dir).eval()
    encoded = tokenizer(list(PROMPTS), return_tensors="pt", padding=True)
    with torch.inference_mode():
        sequences = model.generate(
            **encoded,
            max_new_tokens=N_NEW,
            min_new_tokens=N_NEW,
            do_sample=False,
            num_beams=1,
            pad_token_id=SPECIAL["pad_token_id"],
        )
    new = sequences[:, encoded["input_ids"].shape[1] :].numpy()
    return {"new": new, "model": model, "tokenizer": tokenizer, "encoded": encoded}


def plain_ort_greedy(path: Path, ids: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    """The loop LLM users write: argmax of the last logits (eos kept out, as generate()'s
    min_new_tokens does), `present.*` fed back as `past_key_values.*`, the mask grown by
    one, positions continued from the mask."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    batch = ids.shape[0]
    past = {
        name: np.zeros((batch, 2, 0, 8), np.float32)  # 2 kv heads of 8 (tests/helpers/hf_models.py)
        for name in wanted
        if name.startswith("past_key_values.")
    }
    chosen = []
    for _ in range(n):
        positions = np.cumsum(mask, axis=1) - 1
        positions[mask == 0] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        feeds = {k: v[:, -ids.shape[1] :] if k == "position_ids" else v for k, v in feeds.items()}
        feeds = {k: v.astype(np.int64) for k, v in feeds.items() if k in wanted} | past
        got = dict(zip(outputs, session.run(outputs, feeds), strict=True))
        logits = got["logits"][:, -1, :].copy()
        logits[:, EOS] = -np.inf
        token = logits.argmax(axis=-1)
        chosen.append(token)
        past = {
            name.replace("present.", "past_key_values."): value
            for name, value in got.items()
            if name.startswith("present.")
        }
        ids = token[:, None].astype(np.int64)
        mask = np.concatenate([mask, np.ones((batch, 1), mask.dtype)], axis=1)
    return np.stack(chosen, axis=1)


def _plain(torch_side, path: Path) -> np.ndarray:
    encoded = torch_side["encoded"]
    ids, mask = encoded["input_ids"].numpy(), encoded["attention_mask"].numpy()
    return plain_ort_greedy(path, ids, mask, N_NEW)


def test_the_clean_export_writes_torchs_tokens_as_a_plain_onnx_runtime_loop_does(
    runs, files, torch_side
):
    run = runs["clean"]
    plain = _plain(torch_side, files["clean"])
    assert run.verdict == "pass"
    prompts = run.generation.prompts
    assert [p.prompt for p in prompts] == list(PROMPTS)
    for row, p in enumerate(prompts):
        assert list(p.torch_tokens) == torch_side["new"][row].tolist()
        assert list(p.onnx_tokens) == plain[row].tolist() == torch_side["new"][row].tolist()
        assert p.first_divergence is None and p.match_ratio == 1.0
        assert p.onnx_text == p.torch_text
        assert len(p.onnx_pieces) == N_NEW
    assert run.timings["generation"] > 0


def test_a_tripled_mlp_weight_parts_at_the_first_diverging_position_and_is_not_a_tie(
    runs, files, torch_side
):
    run = runs["bug"]
    plain = _plain(torch_side, files["bug"])
    torch_new = torch_side["new"]
    parted = 0
    for row, p in enumerate(run.generation.prompts):
        assert list(p.torch_tokens) == torch_new[row].tolist()
        assert list(p.onnx_tokens) == plain[row].tolist()  # the plain loop's, exactly
        differs = np.flatnonzero(plain[row] != torch_new[row])
        if differs.size == 0:
            assert p.first_divergence is None
            continue
        parted += 1
        d = p.first_divergence
        at = int(differs[0])
        assert (d.position, d.torch_token, d.onnx_token) == (
            at,
            int(torch_new[row, at]),
            int(plain[row, at]),
        )
        assert d.near_tie is False and d.logits_passed is False
        assert 0 <= d.torch_margin < d.logits_error
        # the logits' error on the same prefix, measured here without Parity: torch's
        # forward and one ONNX Runtime call on the prompt + torch's first `at` tokens
        assert d.logits_error == pytest.approx(
            _error_on_prefix(torch_side, files["bug"], row, at), rel=1e-3
        )
        assert p.match_ratio == np.mean(plain[row] == torch_new[row])
    assert parted, "the planted bug must change some prompt's tokens within the run"


def _error_on_prefix(torch_side, path: Path, row: int, at: int) -> float:
    encoded = torch_side["encoded"]
    keep = encoded["attention_mask"][row].numpy().astype(bool)
    prompt = encoded["input_ids"][row].numpy()[keep]
    prefix = np.concatenate([prompt, torch_side["new"][row, :at]])[None].astype(np.int64)
    with torch.inference_mode():
        ref = torch_side["model"](input_ids=torch.from_numpy(prefix)).logits[0, -1].numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {
        "input_ids": prefix,
        "attention_mask": np.ones_like(prefix),
        "position_ids": np.arange(prefix.shape[1], dtype=np.int64)[None],
    }
    feeds |= {
        i.name: np.zeros((1, 2, 0, 8), np.float32)
        for i in session.get_inputs()
        if i.name.startswith("past_key_values.")
    }
    onnx_logits = session.run(["logits"], feeds)[0][0, -1]
    return float(np.abs(onnx_logits.astype(np.float64) - ref).max())


def test_the_same_parting_at_a_tolerance_its_logits_pass_is_a_near_tie(llama_dir, files):
    loose = Tolerances(default=Tolerance(atol=1e-4, rtol=1e-3)).with_output(
        "logits", Tolerance(atol=1.0, rtol=0.0)
    )
    run = _run(llama_dir, files["bug"], tolerances=loose)
    parted = [p.first_divergence for p in run.generation.prompts if p.first_divergence]
    assert parted
    for d in parted:
        assert d.logits_passed and d.near_tie and d.torch_margin <= 2 * d.logits_error


def test_near_tie_is_the_tolerances_word_and_the_margin_s():
    torch_logits = np.array([1.0, 0.99995, -3.0], np.float32)
    onnx_logits = np.array([0.99996, 1.0, -3.0], np.float32)
    close = divergence(2, torch_logits, onnx_logits, 0, 1, tolerance=Tolerance(atol=1e-4, rtol=0.0))
    assert close.near_tie and close.logits_passed and close.position == 2
    assert close.torch_margin == pytest.approx(5e-5, rel=1e-2)
    strict = divergence(
        2, torch_logits, onnx_logits, 0, 1, tolerance=Tolerance(atol=1e-6, rtol=0.0)
    )
    assert not strict.near_tie and not strict.logits_passed
    # end-of-sequence ids are never chosen, so they are not torch's runner-up either
    eos = divergence(
        0,
        np.array([1.0, 0.9, 0.5], np.float32),
        np.array([0.4, 0.9, 0.5], np.float32),
        1,
        2,
        tolerance=Tolerance(atol=1.0, rtol=0.0),
        eos=(0,),
    )
    assert eos.torch_margin == pytest.approx(0.4)


def test_parity_own_export_generates_torchs_tokens(llama_dir, torch_side):
    run = _run(llama_dir, None)
    assert run.verdict == "pass"
    for row, p in enumerate(run.generation.prompts):
        assert list(p.onnx_tokens) == list(p.torch_tokens) == torch_side["new"][row].tolist()
        assert p.first_divergence is None


def test_json_saved_run_html_and_terminal_keep_and_say_it(llama_dir, files, tmp_path, capsys):
    from parity.reports.html_report import render_html_report
    from parity.reports.saved_run import load_run

    out = tmp_path / "bug.json"
    saved = tmp_path / "bug.parity.npz"
    argv = ["validate", "--model", f"hf:{llama_dir}", "--onnx", str(files["bug"])]
    argv += ["--max-new-tokens", str(N_NEW)] + [a for p in PROMPTS for a in ("--prompt", p)]
    assert main([*argv, "--json", str(out), "--save-run", str(saved)]) == 1  # the tolerances'
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    prompts = data["generation"]["prompts"]
    assert [p["prompt"] for p in prompts] == list(PROMPTS)
    keys = {"prompt", "torch_tokens", "onnx_tokens", "torch_text", "onnx_text", "match_ratio"}
    assert keys | {"first_divergence"} <= set(prompts[0])
    parted = [p for p in prompts if p["first_divergence"] is not None]
    assert parted and all(len(p["torch_tokens"]) == N_NEW for p in prompts)
    first = parted[0]["first_divergence"]
    assert {"position", "torch_token", "onnx_token", "torch_margin", "logits_error"} <= set(first)
    assert first["near_tie"] is False
    # the terminal: both texts, where they part, in words whether it is a near tie, and the
    # summary line names the parting (the verdict is the tolerances')
    assert f"torch: {parted[0]['torch_text']!r}" in text
    assert f"ONNX:  {parted[0]['onnx_text']!r}" in text
    assert f"parts at new token {first['position'] + 1} of {N_NEW}" in text
    assert "not a near tie: the logits there fail the tolerance" in text
    assert "Generation: ONNX Runtime's tokens part from torch's, not a near tie: prompt" in text
    # saved runs keep it, and the HTML report shows it
    reopened = load_run(saved)
    assert [dataclasses.asdict(p) for p in reopened.generation.prompts] == [
        dataclasses.asdict(p) for p in _run_prompts(data)
    ]
    html = render_html_report(reopened)
    assert "Free-running generation" in html and "not a near tie" in html
    # --no-generation: none run, and the JSON says why
    assert main([*argv, "--no-generation", "--json", str(out)]) == 1
    assert "Free-running generation (" not in capsys.readouterr().out
    assert json.loads(out.read_text())["generation"] == {
        "prompts": [],
        "note": "free-running generation not run (--no-generation)",
    }


def _run_prompts(data) -> list[PromptGeneration]:
    from parity.reports.codec import prompts_from_json

    return list(prompts_from_json(data["generation"]["prompts"]))


def test_the_terminal_prints_each_outputs_noise_and_the_layers_notes(
    llama_dir, files, tmp_path, capsys
):
    out = tmp_path / "noise.json"
    argv = ["validate", "--model", f"hf:{llama_dir}", "--onnx", str(files["clean"])]
    assert main([*argv, "--noise-floor", "--layers", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    noise = text.split("Rounding noise (against torch in float64):\n", 1)[1].split("\n\n")[0]
    names = {o["name"] for o in data["outputs"]}
    assert all(o["noise"] is not None for o in data["outputs"])
    for name in names:  # one sentence per output (its worst step), with its figures
        line = next(x for x in noise.splitlines() if x.startswith(f"  {name}: "))
        assert "float32 rounding" in line and "off float64" in line and line.endswith(")"), line
    notes = data["layers"].get("notes") or []
    for note in notes:
        assert note in text


def test_the_generation_page_shows_both_texts_token_by_token_and_the_kv_grids(runs):
    from streamlit.testing.v1 import AppTest

    from parity.dashboard.generation import FIRST_DIFFERENCE

    app = str(Path(__file__).resolve().parents[1] / "app.py")
    run = runs["bug"]
    evil = "**bold** <b>x</b> [link](http://x)"
    first = run.generation.prompts[0]
    marked = dataclasses.replace(first, prompt=evil, torch_text=evil)
    run = dataclasses.replace(
        run,
        generation=dataclasses.replace(
            run.generation, prompts=(marked, *run.generation.prompts[1:])
        ),
    )
    at = AppTest.from_file(app, default_timeout=180)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.switch_page("pages/generation.py").run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Generation"]
    texts = [t.value for t in at.text]
    assert evil in texts  # the user's prompt and the model's text stay text
    assert not any(evil in m.value for m in at.markdown)
    parted = [p for p in run.generation.prompts if p.first_divergence is not None]
    assert any(p.onnx_text in texts for p in parted)
    assert any("not a near tie" in t for t in texts)
    frames = [df.value for df in at.dataframe]
    assert len(frames) == len(run.generation.prompts)
    for p, frame in zip(run.generation.prompts, frames, strict=True):
        frame = frame.data if hasattr(frame, "data") else frame
        assert frame["torch id"].tolist() == list(p.torch_tokens)
        assert frame["ONNX id"].tolist() == list(p.onnx_tokens)
        marks = frame[""].tolist()
        if p.first_divergence is None:
            assert FIRST_DIFFERENCE not in marks
        else:
            assert marks.index(FIRST_DIFFERENCE) == p.first_divergence.position
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # keys and values: steps x layers
    figure = json.loads(charts[0].proto.spec)
    heat = figure["data"][0]
    assert heat["type"] == "heatmap" and len(heat["y"]) == N_NEW and len(heat["x"]) == 2


def test_the_generation_page_is_listed_only_for_runs_that_generate(runs):
    from parity.dashboard.routes import GENERATION_PAGE, PAGES

    run = runs["clean"]
    no_free = dataclasses.replace(run, generation=None)
    assert GENERATION_PAGE not in PAGES
    assert _listed(run) and not _listed(no_free)


def _listed(run) -> bool:
    """Whether the app's navigation lists the Generation page with `run` current."""
    from streamlit.testing.v1 import AppTest

    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=180)
    at.session_state["parity_run"] = run
    at.session_state["parity_tolerances"] = run.tolerances
    at.run()
    assert not at.exception, at.exception
    return any("generation.py" in page for page in _page_paths(at))


def _page_paths(at) -> list[str]:
    """The pages st.navigation registered on the last run (AppTest keeps them to resolve
    switch_page: each one's script path and URL path)."""
    return [
        f"{info.get('script_path', '')} {info.get('url_pathname', '')}"
        for info in at._registered_pages.values()
    ]


def test_prompt_generation_match_ratio_counts_equal_positions():
    p = PromptGeneration("x", (1, 2, 3, 4), (1, 2, 9, 4), "", "")
    assert p.match_ratio == 0.75
    d = TokenDivergence(2, 3, 9, 0.1, 0.2, False, False)
    assert dataclasses.replace(p, first_divergence=d).first_divergence.position == 2
