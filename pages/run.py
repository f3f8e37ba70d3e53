"""Run page: choose a model and its ONNX export, set the inputs, run, watch the steps.

A failed run shows one line (details folded away) and the previous run stays current.
Open with `?demo=NAME` (or set PARITY_DEMO=NAME) to run a demo on first load.
"""

from __future__ import annotations

import os
from dataclasses import replace

import streamlit as st

from parity.dashboard import routes, state
from parity.dashboard.access import may_run, trust_code
from parity.dashboard.findings_view import findings_section
from parity.dashboard.run_data import choose_data, data_refusal
from parity.dashboard.run_form import (
    DEMO,
    DEMO_EXPORT,
    HF,
    HF_EXPORT_CHOICE,
    LIMITS,
    MODEL_SOURCES,
    N_SETS_DEFAULT,
    ONNX_ONLY,
    ONNX_PATH,
    PATH,
    REFERENCE,
    UPLOAD,
    data_values,
    kept_settings,
    onnx_source_key,
)
from parity.dashboard.running import execute, run_config
from parity.dashboard.sidebar import verdict_badge
from parity.dashboard.text import md_code, md_text
from parity.dashboard.uploads import shown_path, upload_onnx, upload_path, upload_paths
from parity.dashboard.where_views import failing_sentences
from parity.errors import InputError, ParityError
from parity.labels import wrong_pair_note
from parity.launch import UPLOAD_LIMIT_WHERE
from parity.load.specs import (
    TRUST_COMMANDS,
    code_words,
    demo_spec,
    hf_spec,
    is_hf_spec,
    reference_path,
    reference_spec,
)
from parity.results import ValidationRun
from parity.run.config import config_problem
from parity.settings import Front, Setting
from parity.show.sentences import failing_outputs
from parity.show.summary import headline
from parity.text import all_text
from parity.verdict import Judge

CODE_UPLOAD_TYPES = ["pt", "pth", "ts", "jit"]  # TorchScript: code, uploadable when trusted


# ------------------------------------------------------------------------- running


def demo_config(name: str):
    return run_config(
        model=demo_spec(name),
        onnx=None,
        n_input_sets=N_SETS_DEFAULT,
        layers=compare_layers(),
        noise_floor=noise_floor(),
        judge=judge(),
    )


def compare_layers() -> bool:
    """The "Compare layers" checkbox (RunConfig.layers): one switch for demo and custom runs."""
    return bool(state.get(state.RUN_LAYERS, False))


def noise_floor() -> bool:
    """The "Measure rounding noise" checkbox (RunConfig.noise_floor)."""
    return bool(state.get(state.RUN_NOISE, False))


def judge() -> Judge:
    """The "Judge by cause" checkbox (RunConfig.judge)."""
    return Judge.CAUSE if state.get(state.RUN_JUDGE, False) else Judge.TOLERANCE


def run_demo(name: str) -> None:
    """Run a demo, and make the "Your model" form show what ran (demo, its export, sets)."""
    state.set_form(
        {
            state.RUN_MODEL_SOURCE: DEMO,
            state.RUN_MODEL_DEMO: name,
            onnx_source_key(demo=True, hf=False): DEMO_EXPORT,
            state.RUN_N_SETS: N_SETS_DEFAULT,
            state.RUN_SEED: 0,
            **data_values(None),
        }
    )
    execute(demo_config(name), label=demo_spec(name))


def autorun_demo() -> None:
    """`?demo=NAME` in the URL (or PARITY_DEMO) runs that demo once per session."""
    name = st.query_params.get("demo") or os.environ.get(state.DEMO_ENV)
    if not name or state.get(state.AUTORUN) == name:
        return
    state.put(state.AUTORUN, name)
    if name not in state.demo_names():
        st.warning(f"Unknown demo {md_code(name)}; demos: {', '.join(state.demo_names())}")
        return
    run_demo(name)


# ------------------------------------------------------------------------- display


def show_failure() -> None:
    failure = state.last_failure()
    if failure is None:
        return
    st.error(
        f"**Run failed** ({failure.kind}): {md_text(failure.message)}",
        icon=":material/error:",
    )
    with st.expander("Details"):
        st.code(failure.detail or failure.message, language=None)
    if state.raw_run() is not None:
        st.caption("The previous run is still the current one.")


def show_wrong_pair() -> None:
    """A run held aside as a likely wrong pair: say so in words, offer to open it anyway."""
    run = state.suspect_run()
    if run is None:
        return
    note = wrong_pair_note(run) or ""
    st.warning(
        f"**Likely a wrong pair**: {md_code(shown_path(run.model))} with "
        f"{md_code(shown_path(run.onnx))}: "
        f"{md_text(note.removeprefix('likely a wrong pair: '))}",
        icon=":material/link_off:",
    )
    current = state.raw_run()
    if current is not None:
        st.caption(f"The previous run ({md_code(current.model)}) is still the current one.")
    if st.button(
        "Open this run anyway", key=state.RUN_OPEN_WRONG_PAIR, icon=":material/open_in_new:"
    ):
        state.set_run(run)
        st.rerun()


def show_current(run: ValidationRun) -> None:
    with st.container(border=True):
        left, right = st.columns([3, 2])
        with left:
            st.markdown(verdict_badge(run, size="### ") + f" &nbsp; {md_code(run.model)}")
            st.markdown(md_text(headline(run)))  # the Overview's and the report's words
            if run.is_multi_candidate:
                from parity.show.candidate_views import verdict_counts

                counts = verdict_counts(run)
                said = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
                st.markdown(md_text(f"{len(run.candidates)} candidates: {said}"))
            note = wrong_pair_note(run)
            if note is not None:
                st.warning(md_text(note[0].upper() + note[1:]), icon=":material/link_off:")
            findings_section(run)  # the Overview's list: a frozen size, a bug, rounding
            if failing_outputs(run):
                st.markdown("**Failing outputs**, worst first:")
                failing_sentences(run, limit=5)
            else:
                said = all_text(len(run.output_names), "output")
                verb = "passes" if len(run.output_names) == 1 else "pass"
                st.markdown(f"{said[0].upper()}{said[1:]} {verb} in every input set.")
            st.page_link(routes.OVERVIEW, label="Open the overview", icon=":material/table_chart:")
            if run.layers is not None:
                where = "Where it starts to diverge"
                st.page_link(routes.LAYERS, label=where, icon=":material/account_tree:")
        with right:
            rows = [{"step": k, "seconds": round(v, 3)} for k, v in run.timings.items()]
            if rows:
                st.dataframe(rows, hide_index=True, width="stretch")


def show_signature(signature) -> None:
    st.markdown(
        f"**ONNX signature** — opset {signature.opset}, producer "
        f"{md_code(signature.producer or '?')}, IR {signature.ir_version}; symbolic dims: "
        + (", ".join(md_code(d) for d in signature.symbolic_dims) or "none")
    )
    rows = [
        {"role": role, "name": t.name, "dtype": t.dtype, "shape": t.shape_text()}
        for role, specs in (("input", signature.inputs), ("output", signature.outputs))
        for t in specs
    ]
    st.dataframe(rows, hide_index=True, width="stretch")


# ------------------------------------------------------------------------- choosing files


def choose_model() -> tuple[str | None, str | None, str | None]:
    """(model spec, weights path, demo name) from the user's choice.

    For REFERENCE ("Stored reference outputs") the spec is "reference:PATH" (no torch model runs).
    """
    source = state.form_widget(
        st.radio,
        "PyTorch model",
        list(MODEL_SOURCES),
        horizontal=True,
        key=state.RUN_MODEL_SOURCE,
        help="Stored reference outputs: torch's outputs saved earlier (`parity validate "
        "--save-reference REF.npz`), for when the model is not at hand. Needs the feeds "
        "they were computed on (below). None: the first ONNX file (at the first provider "
        "and level) is the reference, the others are judged against it.",
    )
    weights = None
    if source == ONNX_ONLY:
        return ONNX_ONLY, None, None
    if source == HF:
        directory = state.form_widget(
            st.text_input,
            "Local transformers directory (config, weights, tokenizer; never downloaded)",
            key=state.RUN_HF_DIR, placeholder="/models/my-llm",
        ).strip()  # fmt: skip
        return (hf_spec(directory) if directory else None), None, None
    if source == REFERENCE:
        path = state.form_widget(
            st.text_input, "Reference outputs (.npz path on this machine)", key=state.RUN_REF_PATH,
            placeholder="ref.npz",
        ).strip()  # fmt: skip
        up = st.file_uploader("...or upload it", type=["npz"], key=state.RUN_REF_UPLOAD)
        uploaded = upload_path("reference", up)
        if uploaded is not None:
            path = str(uploaded)
        return (reference_spec(path) if path else None), None, None
    if source == DEMO:
        name = state.form_widget(st.selectbox, "Demo", state.demo_names(), key=state.RUN_MODEL_DEMO)
        return demo_spec(name), None, name
    if source == PATH:
        spec = state.form_widget(
            st.text_input,
            "Model",
            key=state.RUN_MODEL_PATH,
            placeholder="model.pt2 | scripted.pt | my_models.py:build | package.module:build",
            help="A torch.export .pt2 (read without running code). TorchScript archives "
            "and FILE.py:CALLABLE / package.module:CALLABLE factories are code: the dashboard "
            "runs them only when started with `parity dashboard --trust-code` (from a "
            "checkout: `streamlit run app.py -- --trust-code`).",
        ).strip()
        weights = state.form_widget(
            st.text_input,
            "Weights (optional)",
            key=state.RUN_WEIGHTS_PATH,
            placeholder="weights.safetensors",
        ).strip()
        return spec or None, weights or None, None
    trusted = trust_code()
    up = st.file_uploader(
        "Model file (.pt2 or TorchScript; never a Python file or a pickle)"
        if trusted
        else "Model file (.pt2; TorchScript is code: start with `parity dashboard --trust-code`)",
        type=["pt2", *CODE_UPLOAD_TYPES] if trusted else ["pt2"],
        key=state.RUN_MODEL_UPLOAD,
    )
    wup = st.file_uploader(
        "Weights (optional .safetensors)", type=["safetensors"], key=state.RUN_WEIGHTS_UPLOAD
    )
    model_file, weights_file = upload_path("model", up), upload_path("weights", wup)
    spec = str(model_file) if model_file is not None else None
    weights = str(weights_file) if weights_file is not None else None
    return spec, weights, None


def choose_more_onnx() -> tuple[str, ...]:
    """More ONNX files to compare side by side (paths and uploads): candidates of one run."""
    text = state.form_widget(
        st.text_area,
        "More ONNX files to compare side by side (optional; paths on this machine, one per "
        "line)",
        key=state.RUN_ONNX_MORE, height=68,
        help="Every file x provider x optimisation level is a candidate; the reference runs "
        "once per input set.",
    )  # fmt: skip
    paths = [line.strip() for line in text.splitlines() if line.strip()]
    ups = st.file_uploader(
        "...or upload them",
        type=["onnx"],
        accept_multiple_files=True,
        key=state.RUN_ONNX_MORE_UPLOAD,
    )
    paths += [str(p) for p in upload_paths("onnx_more", ups or [])]
    if paths:
        state.form_widget(
            st.checkbox,
            "These files are one pipeline's stages, in order (the ONNX file first)",
            key=state.RUN_STAGES,
            default=False,
            help="Each file is also judged against the one before it, and the first stage "
            "where the numbers break is named. Unticked, files side by side are stages only "
            "where each is a conversion of the one before (ONNX Runtime's fused ops, "
            "16-bit values, another tool's file).",
        )
    return tuple(paths)


# choose_onnx's answer when Parity is to export the Hugging Face model itself. (A comment,
# not a docstring: Streamlit's magic would draw a bare string on the page.)
HF_EXPORT = "hf-export"


def choose_onnx(demo: str | None, *, hf: bool = False) -> str | None:
    options = ([DEMO_EXPORT] if demo else []) + ([HF_EXPORT_CHOICE] if hf else [])
    options += [ONNX_PATH, UPLOAD]
    source = state.form_widget(
        st.radio,
        "ONNX file",
        options,
        horizontal=True,
        key=onnx_source_key(demo=bool(demo), hf=hf),
    )
    if source == DEMO_EXPORT:
        return state.demo_onnx_path(demo)
    if source == HF_EXPORT_CHOICE:
        st.caption(
            "torch.onnx.export (dynamo) with Optimum's input/output names and dynamic dims "
            "inferred from the captured calls."
        )
        return HF_EXPORT
    if source == ONNX_PATH:
        path = state.form_widget(
            st.text_input, "ONNX path", key=state.RUN_ONNX_PATH, placeholder="/path/to/model.onnx",
            help="External-data files are read from beside it.",
        ).strip()  # fmt: skip
        return path or None
    ups = st.file_uploader(
        "ONNX file: the .onnx with its external-data files (select them together), or a .zip "
        "of them",
        accept_multiple_files=True,  # any extension: external-data files have their own
        key=state.RUN_ONNX_UPLOAD,
    )
    try:
        path = upload_onnx("onnx", ups or [], max_bytes=state.upload_limit_mb() << 20)
    except InputError as exc:
        st.error(f"Upload refused: {md_text(exc.message)}")  # names kept as given
        return None
    return str(path) if path is not None else None


def choose_hf_settings():
    """Prompts, steps, weights and overrides of an `hf:DIR` run -> parity.hf.HfOptions."""
    from parity.run.hf_options import DEFAULT_MAX_NEW_TOKENS, DEFAULT_PROMPT, options_from_text

    prompts = state.form_widget(
        st.text_area,
        "Prompts (one per line; several form a left-padded batch)",
        key=state.RUN_HF_PROMPTS,
        default=DEFAULT_PROMPT,
    )
    c1, c2 = st.columns(2)
    steps = int(
        state.form_widget(
            c1.number_input,
            "Max new tokens (1 prefill + N-1 decode steps)",
            1,
            LIMITS["hf_steps"][1],
            key=state.RUN_HF_STEPS,
            default=DEFAULT_MAX_NEW_TOKENS,
        )
    )
    random_weights = state.form_widget(
        c2.checkbox, "Random weights (build from the config only)", key=state.RUN_HF_RAND
    )
    overrides = state.form_widget(
        st.text_input,
        "Config overrides (KEY=VALUE, comma-separated)",
        key=state.RUN_HF_OVERRIDES,
        placeholder="num_hidden_layers=1",
    )  # fmt: skip
    export = state.form_widget(
        st.text_input,
        "Keep Parity's ONNX export at (optional path; empty: a private temporary folder)",
        key=state.RUN_HF_EXPORT,
        placeholder="/path/to/model.onnx",
    )  # never filled from an opened run: only a path the user typed is written
    options = options_from_text(
        prompts=prompts, max_new_tokens=steps, random_weights=random_weights, overrides=overrides
    )
    return replace(options, export_path=(export or "").strip() or None)


def choose_settings(signature) -> dict:
    from parity.run.inputs import DEFAULT_INT_RANGE, default_dim_size, is_mask_input

    settings: dict = {}
    data = choose_data()
    if data is not None:  # its samples are the inputs: no sizes, sets or feeds to set
        c3, c4 = st.columns([2, 1.4])
        settings["provider"], settings["ort_opt_level"] = _providers_and_levels(c3, c4)
        return {**settings, "data": data}
    dims = {}
    sym = signature.symbolic_dims if signature is not None else ()
    if sym:
        st.markdown("**Sizes of the symbolic dims** (input set 0; later sets grow each one)")
        cols = st.columns(min(len(sym), 4))
        for i, dim in enumerate(sym):
            with cols[i % len(cols)]:
                dims[dim] = int(
                    state.form_widget(
                        st.number_input,
                        md_text(dim),
                        min_value=1,
                        max_value=LIMITS["dim"][1],
                        key=state.RUN_DIM_PREFIX + dim,
                        default=default_dim_size(dim),
                    )
                )
    settings["dims"] = dims
    c1, c2, c3, c4 = st.columns([1, 1, 2, 1.4])  # a provider name is long: its chip whole
    settings["n_input_sets"] = int(
        state.form_widget(
            c1.number_input,
            "Input sets",
            *LIMITS["n_sets"],
            key=state.RUN_N_SETS,
            default=N_SETS_DEFAULT,
        )
    )
    settings["seed"] = int(
        state.form_widget(c2.number_input, "Seed", *LIMITS["seed"], key=state.RUN_SEED, default=0)
    )
    settings["provider"], settings["ort_opt_level"] = _providers_and_levels(c3, c4)
    int_inputs = [
        t for t in (signature.inputs if signature is not None else ())
        if t.dtype.startswith(("int", "uint")) and not is_mask_input(t.name)
    ]  # fmt: skip
    ranges = {}
    if int_inputs:
        st.markdown("**Integer inputs** — values drawn uniformly from [low, high)")
        for t in int_inputs:
            a, b = st.columns(2)
            name = md_text(t.name)
            # step=1: an integer input (with no value given, its numbers set its type)
            lo = state.form_widget(
                a.number_input, f"{name} low", step=1, key=state.RUN_LOW_PREFIX + t.name,
                default=DEFAULT_INT_RANGE[0],
            )  # fmt: skip
            hi = state.form_widget(
                b.number_input, f"{name} high", step=1, key=state.RUN_HIGH_PREFIX + t.name,
                default=DEFAULT_INT_RANGE[1],
            )  # fmt: skip
            if (int(lo), int(hi)) != DEFAULT_INT_RANGE:
                ranges[t.name] = (int(lo), int(hi))
    settings["int_ranges"] = ranges
    settings["float_range"] = _float_range(signature)
    feeds = st.file_uploader(
        "Your own feeds (optional): one .npz per input set, arrays named by ONNX input",
        type=["npz"], accept_multiple_files=True, key=state.RUN_FEEDS_UPLOAD,
    )  # fmt: skip
    typed = state.form_widget(
        st.text_area, "...or their paths on this machine (one per line)", key=state.RUN_FEEDS_PATHS,
        height=68,
    )  # fmt: skip
    settings["input_files"] = tuple(
        [line.strip() for line in typed.splitlines() if line.strip()]
        + [str(p) for p in upload_paths("feeds", feeds or [])]
    )
    if settings["input_files"]:  # each file is one input set at its own sizes
        settings.update(dims={}, n_input_sets=1, int_ranges={}, float_range=None)
    return settings


def _providers_and_levels(c3, c4) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The execution providers and ORT optimisation levels chosen (one candidate each)."""
    from parity.load.onnx_model import ORT_OPT_LEVELS

    providers = state.available_providers()
    cpu = "CPUExecutionProvider"
    chosen = tuple(
        state.form_widget(
            c3.multiselect,
            "Execution providers",
            providers,
            key=state.RUN_PROVIDER,
            default=[cpu if cpu in providers else providers[0]],
            help="Several: one candidate each, side by side.",
        )
    )
    levels = tuple(
        state.form_widget(
            c4.multiselect,
            "ORT optimisation levels",
            ORT_OPT_LEVELS,
            key=state.RUN_OPT,
            default=["all"],
            help="Several: one candidate each (e.g. disable and all: do the fusions change "
            "the numbers?).",
        )
    )
    return chosen, levels


def _float_range(signature) -> tuple[float, float] | None:
    """The Float inputs range field (--float-range LO:HI), when the file has float inputs."""
    from parity.load.dtypes import FLOAT_NAMES
    from parity.run.inputs import parse_float_range

    floats = [
        t for t in (signature.inputs if signature is not None else ()) if t.dtype in FLOAT_NAMES
    ]
    if not floats:
        return None
    text = state.form_widget(
        st.text_input, "Float inputs range", key=state.RUN_FLOAT_RANGE, default="",
        placeholder="LO:HI, e.g. -1:1",
        help="Generated float inputs drawn uniformly in [LO, HI]. Blank: standard normal, or "
        "a quantized file's calibrated input range (its QuantizeLinear's).",
    )  # fmt: skip
    if not str(text).strip():
        return None
    try:
        return parse_float_range(str(text).strip(), Setting("float_range"))
    except ParityError as exc:
        st.error(md_text(exc.words(Front.DASHBOARD)))
        return None


# ------------------------------------------------------------------------- page


def why_not_run(
    config, *, unreadable: str | None, onnx_path: str | None, chosen: bool
) -> tuple[str, str] | None:
    """Why the Run button is off: None (it is on), or (lead, reason) for its caption; the
    rules are `parity.run.config.config_problem`'s, said in the form's words."""
    if unreadable is not None:
        return ", the ONNX file cannot be read:", unreadable
    if not chosen:
        return ":", "choose a PyTorch model."
    if not onnx_path:
        return ":", "choose an ONNX file."
    code = code_words(config.model) if config.model else None
    if code is not None and not may_run(config.model):
        return ":", (
            f"{config.model} is {code}, which is code and runs when loaded: this dashboard "
            f"runs code only when started with {TRUST_COMMANDS[0]} (from a checkout: "
            f"{TRUST_COMMANDS[1]}), or the model its own command line gave."
        )
    problem = config_problem(config)
    if problem is not None:
        return ":", problem.words(Front.DASHBOARD)
    return None


def show_linked_run() -> None:
    """A run a `?run=` link opened (any page can make such a link): shown, read-only; its
    settings reach the Run form only when the user says so."""
    from parity.dashboard.saved_runs import confirm_linked_run, linked_run

    if linked_run() is None:
        return
    with st.container(border=True):
        st.markdown(
            "This run was opened by a link. Its settings are not in the Run form below, and "
            "nothing re-runs it, until you choose to use them."
        )
        st.button(
            "Use this run's settings in the Run form",
            key=state.LINK_CONFIRM,
            on_click=confirm_linked_run,
            icon=":material/edit_note:",
        )


def demo_cards() -> None:
    from parity.load.demos import DEMOS

    st.subheader("Try a demo")
    cols = st.columns(len(DEMOS))
    for col, (name, demo) in zip(cols, DEMOS.items(), strict=True):
        with col, st.container(border=True):
            st.markdown(f"**{demo.title}**")
            st.button(f"Run demo:{name}", key=state.RUN_DEMO_PREFIX + name, type="primary")
            first = demo.description.split(". ")[0].rstrip(".") + "."
            st.caption(first, help=demo.description)


def page() -> None:
    st.title("Run a validation")
    st.caption(
        "Parity runs your PyTorch model and its ONNX export on the same inputs and shows, "
        "element by element, where they disagree."
    )
    if state.pop(state.LAYERS_DONE, False):  # a run compared layers: the next need not
        state.set_form({state.RUN_LAYERS: False})
    state.form_widget(  # kept while other pages are shown
        st.checkbox,
        "Compare layers: find the op where the export starts to diverge",
        key=state.RUN_LAYERS,
        default=False,
        help="For the next run: also compares the intermediate values of both sides "
        "(slower); the Layers page shows where the error is born. The Layers page can also "
        "re-run the current run with layers compared.",
    )
    state.form_widget(  # kept while other pages are shown
        st.checkbox,
        "Measure rounding noise: run the torch model once more in float64",
        key=state.RUN_NOISE,
        default=False,
        help="Says, per float32 output, whether ONNX's error is float32 rounding (about "
        "torch's own error against float64) or not. The verdict stays the tolerance's. "
        "Unchecked, a run whose outputs fail still measures it where the model has at most "
        "50 M parameters.",
    )
    state.form_widget(  # kept while other pages are shown
        st.checkbox,
        "Judge by cause: fail on a bug, pass what the file was meant to do",
        key=state.RUN_JUDGE,
        default=False,
        help="The verdict by cause: a difference that is the file's own rounding, quantization "
        "or a deploy tool's intended approximation (each measured) passes; a bug fails even "
        "within the tolerance. Unchecked, every output within the tolerance passes.",
    )
    from parity.load.demos import DEMOS

    for name in DEMOS:  # a demo button clicked on the last rerun: run it before drawing
        if state.get(state.RUN_DEMO_PREFIX + name):
            run_demo(name)
    autorun_demo()
    show_failure()
    show_wrong_pair()
    run = state.raw_run()
    if run is not None:  # the answer first; the demos below the form
        show_current(state.current_run() or run)
    else:
        demo_cards()

    show_linked_run()
    st.subheader("Your model")
    st.caption(
        f"Uploads up to {state.upload_limit_mb():,} MB (set with {md_text(UPLOAD_LIMIT_WHERE)}); "
        "big files are better given as a path on this machine."
    )
    with st.container(border=True):
        model, weights, demo = choose_model()
        is_hf = is_hf_spec(model)
        onnx_only = model == ONNX_ONLY
        onnx_path = choose_onnx(demo, hf=is_hf)
        more_onnx = () if is_hf else choose_more_onnx()
        signature = None
        unreadable = None
        if onnx_path and onnx_path != HF_EXPORT:
            try:
                signature = state.load_onnx_cached(onnx_path).signature
            except Exception as exc:
                unreadable = (str(exc).splitlines() or [""])[0]
                unreadable = unreadable.replace(onnx_path, shown_path(onnx_path))
                st.error(f"Cannot read this ONNX file: {md_text(unreadable)}")
            if signature is not None:
                show_signature(signature)
        hf_options = None
        if is_hf:
            try:
                hf_options = choose_hf_settings()
            except ParityError as exc:
                st.error(md_text(exc.words(Front.DASHBOARD)))
            settings = {}
        else:
            settings = choose_settings(signature)
        reference = reference_path(model)
        chosen = bool(model)  # a model, a reference, or ONNX files only
        if reference is not None:  # its feeds: config_problem says when they are missing
            model = None
        if onnx_only:
            model = None
        timeout = state.form_widget(
            st.number_input, "Time limit (seconds; 0 = none)", min_value=0,
            max_value=LIMITS["timeout"][1],
            key=state.RUN_TIMEOUT, default=0,
            help="ONNX Runtime is stopped at the limit; torch is checked between input sets.",
        )  # fmt: skip
        config = run_config(
            model=model,
            onnx=None if onnx_path in (None, HF_EXPORT) else (onnx_path, *more_onnx),
            weights=weights,
            reference_file=reference,
            hf=hf_options,
            layers=compare_layers(),
            stages=bool(more_onnx) and bool(state.get(state.RUN_STAGES, False)),
            noise_floor=noise_floor() and bool(model),
            judge=judge(),
            timeout=float(timeout) or None,
            **settings,
            **kept_settings(model),
        )
        why = why_not_run(config, unreadable=unreadable, onnx_path=onnx_path, chosen=chosen)
        if why is None and is_hf and hf_options is None:  # its settings' error is above them
            why = (":", "fix the model's settings above.")
        refused = data_refusal(config.data)
        if why is None and refused is not None:
            why = (":", refused)
        b_col, why_col = st.columns([1, 5], vertical_alignment="center")
        if why:
            why_col.caption(f":red[Run is off{why[0]}] {md_text(why[1])}")
        if b_col.button("Run", type="primary", disabled=why is not None, key=state.RUN_CUSTOM):
            label = model or (f"reference {reference}" if reference else f"reference {onnx_path}")
            execute(config, label=label)
            st.rerun()  # redraw the summary and any failure above with the new state
    state.keep_form()
    if run is not None:
        demo_cards()


page()
