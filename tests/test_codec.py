"""The codec (parity.reports.codec): every result type to JSON and back. A saved run carrying
each field added this session reopens equal, its JSON report equals the live run's, and a
manifest written before the codec existed (tests/data/manifest_before_codec.json) still reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from parity.errors import FieldError
from parity.judge.compare import compare_outputs
from parity.layers.result import Confirmation, KeptValue, LayersResult, LayerValue
from parity.reports import codec
from parity.reports.report import report_dict
from parity.reports.saved_run import load_run, read_manifest, save_run
from parity.results import (
    CandidateInfo,
    GenerationInfo,
    GenerationStep,
    InputSet,
    Noise,
    OutputSet,
    PromptGeneration,
    Provenance,
    RunKind,
    SavedFrom,
    TokenDivergence,
    ValidationRun,
)
from parity.signature import OnnxSignature, TensorSpec
from parity.tolerances import Tolerance, Tolerances

GOLDEN = Path(__file__).parent / "data" / "manifest_before_codec.json"

NOISES = (
    Noise(
        torch_error=2e-4,
        onnx_error=3e-4,
        ratio=1.5,
        precision="float16",
        emulated="float32 rounded to float16 after each op",
        export_error=3e-6,  # its float32 twin against torch with its float16 weights
    ),
    Noise(
        torch_error=0.01,
        onnx_error=0.02,
        ratio=2.0,
        precision="int8",
        scale=0.004,
        tensors=3,
        clipped=0.25,
    ),
    Noise(torch_error=0.0, onnx_error=1e-7, ratio=None),
)


def _layer_value(order: int, input_set: int, status: str, max_abs: float) -> LayerValue:
    return LayerValue(
        order=order,
        onnx_value=f"v{order}",
        onnx_node=f"/n{order}",
        onnx_op="Conv",
        torch_module=f"m.{order}",
        torch_node=None,
        input_set=input_set,
        shape=(1, 4),
        max_abs=max_abs,
        max_rel=float("inf"),
        scale=0.5,
        error_ratio=max_abs / 0.5,
        jump=float("nan"),
        cosine=0.99,
        status=status,
        inputs=(order - 1,) if order else (),
        sqnr_db=31.5,
        dtype="float16" if order % 2 else "",
    )


def _layers(rng: np.random.Generator, shift: int) -> LayersResult:
    values = tuple(
        _layer_value(o + shift, s, "diverges" if o == 1 else "pass", 1e-3 * (o + 1))
        for s in range(2)
        for o in range(3)
    )
    return LayersResult(
        criterion="error ratio",
        matching="onnx names",
        matched=3,
        unmatched_onnx=1,
        unmatched_torch=0,
        first_divergence=values[1],
        values=values,
        notes=("one note",),
        threshold=1e-3,
        min_jump=10.0,
        kept=(
            KeptValue(
                1 + shift,
                0,
                f"v{1 + shift}",
                rng.standard_normal((1, 4)),
                rng.standard_normal((1, 4)).astype(np.float16),
            ),
        ),
        findings={
            "exclude_from_quantization": ["/n1"],
            "exclusion_check": {
                "sqnr_db_before": 12.5,
                "sqnr_db_after": 30.0,
                "gain_db": 17.5,
                "bypassed": ["/n1"],
                "method": "simulated",
                "tried": 2,
                "candidates": 3,
                "results": [
                    {"nodes": ["/n1"], "sqnr_db": 30.0},
                    {"nodes": ["/n2"], "sqnr_db": None},
                ],
            },
            "keep_float32": ["/n2"],
        },
        confirmations=(
            Confirmation(
                1 + shift,
                0,
                f"v{1 + shift}",
                f"/n{1 + shift}",
                "Conv",
                "m.1",
                "born",
                2e-3,
                4e-3,
                1,
            ),
            Confirmation(
                2 + shift,
                1,
                f"v{2 + shift}",
                f"/n{2 + shift}",
                "Relu",
                None,
                "unconfirmed",
                reason="inputs not matched",
            ),
        ),
    )


def rich_run() -> ValidationRun:
    """Two candidates (ONNX against ONNX), --layers for each, every noise precision, labelled
    input sets, exclusion masks, notes: every field the report and the saved run carry."""
    rng = np.random.default_rng(7)
    names = ("y", "z", "ids")
    sig = OnnxSignature(
        inputs=(TensorSpec("x", "float32", ("batch", 4)),),
        outputs=tuple(TensorSpec(n, "float32", ("batch", 4)) for n in names),
        opset=18,
        producer="pytorch 2.13",
        ir_version=9,
    )
    tol = Tolerance(1e-4, 1e-3)
    input_sets, refs, exclusions = [], [], []
    for s in range(2):
        input_sets.append(
            InputSet(
                s,
                {"x": rng.standard_normal((2, 4)).astype(np.float32)},
                label=f"set {s}: batch 2 (the export's size)",
            )
        )
        refs.append(
            OutputSet(
                {
                    "y": rng.standard_normal((2, 4)).astype(np.float32),
                    "z": rng.standard_normal((2, 4)).astype(np.float32),
                    "ids": rng.integers(0, 9, (2, 4)),
                },
                seconds=0.5,
                notes=("reference note",),
            )
        )
        exclusions.append({"y": np.array([[False, False, False, True]])})
    onnx_outputs, comparisons, candidates = [], [], []
    for k in range(2):
        candidates.append(
            CandidateInfo(
                k,
                f"/nonexistent/m{k}.onnx",
                "CPUExecutionProvider",
                "all" if k else "disabled",
                "ab" * 32,
                notes=("cast",),
                seconds=0.25 * (k + 1),
            )
        )
        for s in range(2):
            arrays = {}
            for j, name in enumerate(names):
                ref = refs[s].arrays[name]
                onnx = ref + (rng.standard_normal(ref.shape) * 1e-3).astype(ref.dtype)
                if name == "y" and k == 1:
                    onnx = onnx.copy()
                    onnx[0, 0] = np.nan
                arrays[name] = onnx
                c = compare_outputs(ref, onnx, name=name, input_set=s, tolerance=tol)
                c = replace(
                    c,
                    candidate=k,
                    noise=NOISES[j] if ref.dtype.kind == "f" else None,
                    notes=("a note",) if j == 0 else (),
                )
                comparisons.append(c)
            onnx_outputs.append(OutputSet(arrays, seconds=0.125))
    layers = {k: _layers(rng, 10 * k) for k in range(2)}
    return ValidationRun.from_rows(
        model="/nonexistent/ref.onnx",
        onnx="/nonexistent/m0.onnx",
        signature=sig,
        tolerances=Tolerances(tol, {"z": Tolerance(1e-2, 0.0)}),
        environment={"torch": "2.13.0", "onnxruntime": "1.32", "provider": "CPU"},
        input_sets=tuple(input_sets),
        outputs=tuple(comparisons),
        ref_outputs=tuple(refs),
        onnx_outputs=tuple(onnx_outputs),
        exclusions=tuple(exclusions),
        timings={"onnx": 0.5, "compare": float("nan")},
        provenance=Provenance(
            kind=RunKind.ONNX,
            seed=3,
            opset=18,
            ort_opt_level="all",
            reference_file="/nonexistent/ref.onnx",
            reference_provider="CPUExecutionProvider",
            reference_opt_level="disabled",
            inputs_by="position",
            inputs_note="names differ",
            onnx_sha256="cd" * 32,
        ),
        candidates=tuple(candidates),
    ).with_layers(layers)


def generation_run() -> ValidationRun:
    """An hf: run of a causal LM: steps, summary and two free-running prompts, one parting."""
    rng = np.random.default_rng(3)
    tol = Tolerance(1e-4, 0.0)
    steps = tuple(
        GenerationStep(
            i,
            i,
            "prefill" if i == 0 else "decode",
            f"step {i}",
            1,
            5 if i == 0 else 1,
            0 if i == 0 else 4 + i,
        )
        for i in range(2)
    )
    input_sets, refs, onnxs, comparisons = [], [], [], []
    for s in range(2):
        ref = rng.standard_normal((1, 3, 8)).astype(np.float32)
        onnx = ref + np.float32(2e-4)
        input_sets.append(InputSet(s, {"input_ids": rng.integers(0, 50, (1, 3))}, f"step {s}"))
        refs.append(OutputSet({"logits": ref}))
        onnxs.append(OutputSet({"logits": onnx}))
        comparisons.append(compare_outputs(ref, onnx, name="logits", input_set=s, tolerance=tol))
    parting = TokenDivergence(
        position=1,
        torch_token=5,
        onnx_token=7,
        torch_margin=float("inf"),
        logits_error=3e-4,
        near_tie=False,
        logits_passed=False,
        torch_piece=" cat",
        onnx_piece=" dog",
    )
    prompts = (
        PromptGeneration(
            "Hello",
            (1, 5, 2),
            (1, 7, 2),
            "Hello cat",
            "Hello dog",
            parting,
            ("a", " cat", "."),
            ("a", " dog", "."),
        ),
        PromptGeneration("Same", (3, 4), (3, 4), "x y", "x y"),
    )
    return ValidationRun.from_rows(
        model="hf:/nonexistent/tiny-llama",
        onnx="/nonexistent/model.onnx",
        signature=None,
        tolerances=Tolerances(tol),
        environment={"transformers": "4.99"},
        input_sets=tuple(input_sets),
        outputs=tuple(comparisons),
        ref_outputs=tuple(refs),
        onnx_outputs=tuple(onnxs),
        timings={"generate": 1.0},
        provenance=Provenance(kind=RunKind.HF_GENERATE, seed=0),
        generation=GenerationInfo(
            summary={"task": "text-generation", "steps": 2, "nested": {"nan": float("nan")}},
            steps=steps,
            prompts=prompts,
        ),
    )


RUNS = {"rich": rich_run, "generation": generation_run}


def _golden(run: ValidationRun, tmp: Path) -> dict:
    manifest = read_manifest(save_run(run, tmp))
    manifest.pop("saved_by")
    return {"manifest": manifest, "report": report_dict(run)}


CONFIG = {"model": "demo:cnn", "tolerances": {"atol": 1e-5}, "sets": [1, 2], "layers": None}


def _reopen(run: ValidationRun, tmp_path: Path, name: str = "r") -> ValidationRun:
    return load_run(save_run(run, tmp_path / f"{name}.parity.npz"))


def _json(value: object) -> object:
    """As a file holds it (tuples lists, keys strings)."""
    return json.loads(json.dumps(value))


# fields added to the report after the golden file was written (additive, per the contract)
LATER_FIELDS = {
    "first_divergence_by_input_set",
    "frozen",
    "static_axes",
    "findings",
    "judge",  # the verdict by cause (--judge)
    "tolerance_verdict",
    "tolerance_forgives",
    "intended",  # outputs beyond their tolerance by what the file meant (cause_labels)
    "suggested_tolerances",
    "input_of",  # layers.values[]
    "ops",
    "analyses",
    "not_comparable",  # layers.values[]: why no torch value stands for it
    "covers",  # layers.values[]: a fused node's modules
    "feeding",  # layers.values[]: the unmatched nodes feeding a flagged value, by op
    "moves_data",  # layers.values[]: its node only moves data
    "matching_errors",  # layers
    "pairing",  # a reference output set's pairing line, saved since the codec is derived
    "export_error",  # outputs[].noise: a 16-bit file's float32 twin against torch
}


def _as_then(value: object) -> object:
    """`value` without the fields added after the golden file: what the golden can equal."""
    if isinstance(value, dict):
        return {k: _as_then(v) for k, v in value.items() if k not in LATER_FIELDS}
    if isinstance(value, list):
        return [_as_then(v) for v in value]
    return value


@pytest.mark.parametrize("key", list(RUNS))
def test_json_report_of_a_reopened_run_equals_the_original(key: str, tmp_path: Path) -> None:
    run = RUNS[key]()
    live = _json(report_dict(run))
    assert _json(report_dict(_reopen(run, tmp_path))) == live
    # and equals the report the Parity before the codec wrote of the same run
    assert _as_then(live) == json.loads(GOLDEN.read_text())[key]["report"]


def test_every_field_added_this_session_survives_a_save(tmp_path: Path) -> None:
    run = rich_run()
    run = replace(run, provenance=replace(run.provenance, config=CONFIG))
    back = _reopen(run, tmp_path)
    # outputs[].noise.precision / quantization / emulated
    assert [c.noise for c in back.comparisons] == [c.noise for c in run.comparisons]
    assert {c.noise.precision for c in back.comparisons if c.noise} == {"float16", "int8"}
    int8 = next(c.noise for c in back.comparisons if c.noise and c.noise.precision == "int8")
    assert (int8.scale, int8.tensors, int8.clipped) == (0.004, 3, 0.25)
    assert any(c.noise and c.noise.emulated for c in back.comparisons)
    # Provenance.config, input set labels
    assert back.provenance == run.provenance
    assert dict(back.provenance.config) == CONFIG
    assert [s.label for s in back.input_sets] == [s.label for s in run.input_sets]
    # layers.exclusion_check.*, layers.values[].dtype, each candidate's layers and kept arrays
    # (the layers block is the report's, strict: a non-finite figure reads back as None)
    assert back.layers.to_json() == run.layers.to_json()
    assert back.layers.findings["exclusion_check"] == run.layers.findings["exclusion_check"]
    assert [v.dtype for v in back.layers.values] == [v.dtype for v in run.layers.values]
    assert "float16" in {v.dtype for v in back.layers.values}
    assert [c.layers.to_json() for c in back.candidates] == [
        c.layers.to_json() for c in run.candidates
    ]
    assert back.candidates[0].layers is back.layers  # stored once, not twice
    for c in run.candidates:
        for mine, theirs in zip(c.layers.kept, back.candidate(c.index).layers.kept, strict=True):
            assert mine.onnx.dtype == theirs.onnx.dtype
            np.testing.assert_array_equal(mine.ref, theirs.ref)
            np.testing.assert_array_equal(mine.onnx, theirs.onnx)
    assert back.infos == run.infos
    assert [c.notes for c in back.comparisons] == [c.notes for c in run.comparisons]


def test_an_error_row_and_the_frozen_nodes_survive_a_save(tmp_path: Path) -> None:
    """Status error (ONNX Runtime raised on that set) and `frozen` reopen as they were; the
    JSON report carries both; a run saved before `frozen` existed reopens with none."""
    from parity.results import FrozenNode, FrozenNodes, Status

    run = rich_run()
    raised = replace(
        run.outputs[0],
        status=Status.ERROR,
        stats=None,
        profile=None,
        n_mismatch=None,
        onnx_shape=None,
        onnx_dtype=None,
        message="ONNX Runtime raised: Reshape node '/Reshape': requested shape:{1,8,3072}",
    )
    frozen = FrozenNode(
        node="/Div",
        op="Div",
        kind="size",
        constant=(3072.0,),
        dims={"height": 64, "width": 48},
        source="models.py:18",
        confirmed=True,
        text="This export only works at its own size: node '/Div' divides by 3072.",
    )
    run = run.with_rows((raised, *run.outputs[1:])).with_result("frozen", FrozenNodes((frozen,)))
    back = _reopen(run, tmp_path)
    assert back.outputs[0].status is Status.ERROR
    assert back.outputs[0].message == raised.message
    assert back.frozen == (frozen,)
    report = _json(report_dict(back))
    assert report["outputs"][0]["status"] == "error"
    assert report["frozen"][0] == {
        "node": "/Div",
        "op": "Div",
        "kind": "size",
        "constant": [3072.0],
        "dims": {"height": 64, "width": 48},
        "source": "models.py:18",
        "confirmed": True,
        "text": frozen.text,
    }
    from parity.results import StaticAxes, StaticAxis

    axis = StaticAxis("x", 2, 64, 80, "Input 'x' is fixed at 64 on axis 2 in the ONNX file.")
    with_axis = run.with_result("static_axes", StaticAxes((axis,)))
    assert _reopen(with_axis, tmp_path, "s").static_axes == (axis,)
    assert replace(run, results={}).frozen == () == replace(run, results={}).static_axes


def test_generation_prompts_survive_a_save(tmp_path: Path) -> None:
    run = generation_run()
    back = _reopen(run, tmp_path)
    assert back.generation.prompts == run.generation.prompts  # torch_margin inf comes back inf
    assert back.generation.steps == run.generation.steps
    assert back.generation.prompts[0].first_divergence.torch_piece == " cat"
    assert back.generation.summary["nested"] == {"nan": None}  # free-form, made strict


RECORD_KEYS = ("comparisons", "onnx_outputs", "layers", "quantization")  # its own
FLAT_KEYS = ("candidate_layers",)  # where older manifests kept them, now in the candidates


def test_a_manifest_written_before_the_codec_still_reads(tmp_path: Path) -> None:
    """The pre-codec manifest (its member table names the same arrays, hash for hash) decodes
    to a run whose report is the one written then."""
    gold = json.loads(GOLDEN.read_text())
    for key, make in RUNS.items():
        path = save_run(make(), tmp_path / f"{key}.parity.npz")
        now, then = read_manifest(path), gold[key]["manifest"]
        for name, member in then["members"].items():
            assert now["members"][name] == member, name
        assert {k: v for k, v in now["provenance"].items() if k != "config"} == then["provenance"]
        # each candidate now keeps its rows, ONNX output sets and layers: flattened in
        # candidate order they are what the flat manifest held, member names included
        records = _as_then(_json(now["candidates"]))
        for field in ("comparisons", "onnx_outputs"):
            assert [x for c in records for x in c[field]] == then[field], field
        # (a candidate without layers has no "layers" now, as with every analysis's result)
        assert records[0].get("layers") == then["layers"]
        if "candidate_layers" in then:  # older still: the lead's layers only were kept
            by_index = {e["candidate"]: e for e in then["candidate_layers"] if "layers" in e}
            for c in records[1:]:
                assert c.get("layers") == by_index.get(c["index"], {}).get("layers"), c["index"]
        infos = [{k: v for k, v in c.items() if k not in RECORD_KEYS} for c in records]
        if then["candidates"]:
            assert infos == then["candidates"]
        else:  # made without candidates: its implied one is written now
            assert [c["index"] for c in infos] == [0]
        # each input set now keeps its reference outputs
        references = [e.pop("reference") for e in now["input_sets"]]
        assert _as_then(_json(references)) == then["ref_outputs"]
        same = set(then) - {"members", "provenance", "candidates", *RECORD_KEYS, *FLAT_KEYS}
        same -= {"ref_outputs"}
        assert {k: _as_then(_json(now[k])) for k in same} == {k: then[k] for k in same}
        with np.load(path, allow_pickle=False) as arrays:

            def get(member: object, where: str, arrays: object = arrays) -> np.ndarray:
                return arrays[str(member).removesuffix(".npy")]

            saved = SavedFrom(str(path), then["identity"], {}, then["outputs_kept"])
            old = codec.run_from_json(then, get, saved)
        report = gold[key]["report"]
        # before the codec, a saved run kept the first candidate's layers only: the
        # upgrade gives them to the lead candidate, the others have none
        now_report = _as_then(_json(report_dict(old)))
        for data in (report, now_report):
            for entry in data["candidates"]:
                entry.pop("layers", None)
        assert now_report == report, key
        assert old.candidates[0].layers is old.layers
        assert old.provenance.config is None and all(c.layers is None for c in old.candidates[1:])


def test_a_manifest_from_before_provenance_had_a_type_still_reads(tmp_path: Path) -> None:
    """Runs saved before "provenance" and "generation" existed kept both in "extra"."""
    path = save_run(generation_run(), tmp_path / "g.parity.npz")
    manifest = read_manifest(path)
    del manifest["provenance"], manifest["generation"]
    steps = [{"index": 0, "step": 0, "phase": "prefill", "label": "step 0", "batch": 1}]
    manifest["extra"] = {"kind": "hf_generate", "seed": 4, "summary": {"task": "t"}, "steps": steps}
    with np.load(path, allow_pickle=False) as arrays:
        run = codec.run_from_json(
            manifest,
            lambda member, where: arrays[str(member).removesuffix(".npy")],
            SavedFrom(str(path), {}, {}, True),
        )
    assert (run.provenance.kind, run.provenance.seed) == (RunKind.HF_GENERATE, 4)
    assert run.generation.steps == (GenerationStep(0, 0, "prefill", "step 0", 1, 0, 0),)
    assert run.generation.prompts == ()


def test_every_noise_round_trips_through_its_codec() -> None:
    for noise in NOISES:
        assert codec.noise_from_json(_json(codec.noise_to_json(noise)), "noise") == noise
    assert codec.noise_to_json(None) is None
    assert codec.noise_from_json(
        {"torch_error": 1.0, "onnx_error": 2.0, "ratio": 2.0}, "n"
    ) == Noise(1.0, 2.0, 2.0)  # saved before precision


def test_a_malformed_field_is_named_by_its_path() -> None:
    with pytest.raises(FieldError, match=r"provenance\.config"):
        codec.provenance_from_json({"kind": "torch", "config": [1, 2]})
    with pytest.raises(FieldError, match=r"o\.precision"):
        codec.noise_from_json({"precision": "float8"}, "o")
    with pytest.raises(FieldError, match=r"generation\.prompts\[0\]\.torch_tokens\[1\]"):
        codec.prompts_from_json(
            [
                {
                    **codec.prompt_to_json(generation_run().generation.prompts[0]),
                    "torch_tokens": [1, "two"],
                }
            ]
        )


if __name__ == "__main__":  # `python tests/test_codec.py --write-golden`, by the pre-codec Parity
    import tempfile

    assert sys.argv[1:] == ["--write-golden"]
    with tempfile.TemporaryDirectory() as tmp:
        data = {key: _golden(make(), Path(tmp) / f"{key}.parity.npz") for key, make in RUNS.items()}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def test_a_fresh_process_reopens_every_analysis_result(tmp_path: Path) -> None:
    """A result type registers when its module is imported: `parity report` in a fresh
    process, which imports no analysis, still reads each candidate's layers back."""
    path = save_run(rich_run(), tmp_path / "fresh.parity.npz")
    code = (
        "import sys; from parity.reports.saved_run import load_run; "
        "run = load_run(sys.argv[1]); "
        "print(sum(c.layers is not None for c in run.candidates), len(run.layers.kept))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    run = rich_run()
    assert done.stdout.split() == [
        str(sum(c.layers is not None for c in run.candidates)),
        str(len(run.layers.kept)),
    ]
