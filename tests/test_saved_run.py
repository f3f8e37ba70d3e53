"""Saved runs: exact round trip, memory-mapped reopening, refusal of altered or pickled files."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tracemalloc
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from parity.errors import SavedRunError
from parity.judge.compare import compare_outputs
from parity.reports.report import report_dict
from parity.reports.saved_run import MANIFEST, SCHEMA, load_run, read_manifest, save_run
from parity.results import (
    ErrorStats,
    InputSet,
    OutputComparison,
    OutputSet,
    Provenance,
    RunKind,
    Status,
    ValidationRun,
)
from parity.signature import OnnxSignature, TensorSpec
from parity.tolerances import Tolerance, Tolerances


def _stats(ref: np.ndarray, onnx: np.ndarray) -> ErrorStats:
    """Plain float64 statistics, enough to give the manifest real numbers to carry."""
    err = np.abs(onnx.astype(np.float64) - ref.astype(np.float64))
    if err.size == 0:
        return ErrorStats(None, None, None, None, None, None, None, None, 0, 0, None, None)
    worst = np.unravel_index(int(np.argmax(err)), err.shape)
    return ErrorStats(
        max_abs=float(err.max()),
        worst_index=tuple(int(i) for i in worst),
        ref_at_worst=float(ref[worst]),
        onnx_at_worst=float(onnx[worst]),
        max_rel=None,
        mean_abs=float(err.mean()),
        rms=float(np.sqrt((err**2).mean())),
        p99_abs=float(np.quantile(err, 0.99)),
        n_nan_mismatch=0,
        n_inf_mismatch=2,
        cosine=None,
        snr_db=float("inf"),
    )


def make_run(outputs: dict[str, np.ndarray], *, noise: float = 1e-3, n_sets: int = 1):
    """A ValidationRun over the given reference outputs; ONNX = reference + seeded noise."""
    rng = np.random.default_rng(0)
    sig = OnnxSignature(
        inputs=(TensorSpec("x", "float32", ("batch", 3)), TensorSpec("ids", "int64", (None,))),
        outputs=tuple(TensorSpec(n, str(a.dtype), tuple(a.shape)) for n, a in outputs.items()),
        opset=18,
        producer="pytorch 2.13",
        ir_version=9,
    )
    input_sets, refs, onnxs, comparisons = [], [], [], []
    for s in range(n_sets):
        feeds = {
            "x": rng.standard_normal((2 + s, 3)).astype(np.float32),
            "ids": rng.integers(0, 100, size=5 + s),
        }
        input_sets.append(InputSet(index=s, feeds=feeds, label=f"set {s}"))
        onnx_arrays = {}
        for name, ref in outputs.items():
            onnx = ref + (noise * rng.standard_normal(ref.shape)).astype(ref.dtype)
            onnx_arrays[name] = onnx
            comparisons.append(
                OutputComparison(
                    input_set=s,
                    name=name,
                    status=Status.FAIL,
                    tolerance=Tolerance(1e-5, 0.0),
                    ref_shape=ref.shape,
                    onnx_shape=onnx.shape,
                    ref_dtype=str(ref.dtype),
                    onnx_dtype=str(onnx.dtype),
                    n_elements=ref.size,
                    stats=_stats(ref, onnx),
                    profile=compare_outputs(
                        ref, onnx, name=name, input_set=s, tolerance=Tolerance(1e-5, 0.0)
                    ).profile,
                    n_mismatch=int(np.count_nonzero(np.abs(onnx - ref) > 1e-5)),
                    message="values differ",
                )
            )
        refs.append(OutputSet(arrays=dict(outputs), seconds=0.25, notes=("y: bf16 as f32",)))
        onnxs.append(OutputSet(arrays=onnx_arrays, seconds=0.125))
    return ValidationRun.from_rows(
        model="demo:cnn",
        onnx="/nonexistent/model.onnx",
        signature=sig,
        # an override for one of its outputs (a name it lacks is refused by rejudge)
        tolerances=Tolerances(Tolerance(1e-5, 0.0), {next(iter(outputs)): Tolerance(1e-3, 1e-2)}),
        environment={"torch": "2.13.0", "onnxruntime": "1.32"},
        input_sets=tuple(input_sets),
        outputs=tuple(comparisons),
        ref_outputs=tuple(refs),
        onnx_outputs=tuple(onnxs),
        timings={"torch": 0.5, "compare": float("nan")},
        provenance=Provenance(kind=RunKind.TORCH, seed=3, opset=17, ort_opt_level="basic"),
    )


def assert_same_comparisons(a: ValidationRun, b: ValidationRun) -> None:
    """Every field equal; profiles (compared by identity) equal array by array."""
    assert len(a.comparisons) == len(b.comparisons)
    for x, y in zip(a.comparisons, b.comparisons, strict=True):
        assert replace(x, profile=None) == replace(y, profile=None)
        assert (x.profile is None) == (y.profile is None)
        if x.profile is not None:
            left, right = x.profile.to_arrays(), y.profile.to_arrays()
            assert list(left) == list(right)
            for key in left:
                np.testing.assert_array_equal(left[key], right[key], err_msg=key)


def assert_same_arrays(a: OutputSet | InputSet, b: OutputSet | InputSet) -> None:
    left = a.arrays if isinstance(a, OutputSet) else a.feeds
    right = b.arrays if isinstance(b, OutputSet) else b.feeds
    assert list(left) == list(right)
    for name in left:
        assert left[name].dtype == right[name].dtype, name
        assert left[name].shape == right[name].shape, name
        np.testing.assert_array_equal(left[name], right[name])


def test_round_trip_keeps_every_array_and_field_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    outputs = {
        "logits": rng.standard_normal((4, 10)).astype(np.float32),
        "half": rng.standard_normal((3, 5)).astype(np.float16),
        "fortran": np.asfortranarray(rng.standard_normal((6, 7))),
        "strided": rng.standard_normal((8, 9)).astype(np.float32)[::2, ::3],
        "scalar": np.array(3.5, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "ints": np.arange(12, dtype=np.int64).reshape(3, 4),
        "big-endian": np.arange(6, dtype=">f4"),
    }
    run = make_run(outputs, n_sets=2)
    path = save_run(run, tmp_path / "run.parity.npz")
    loaded = load_run(path)

    for a, b in zip(run.input_sets, loaded.input_sets, strict=True):
        assert (a.index, a.label) == (b.index, b.label)
        assert_same_arrays(a, b)
    for side in ("ref_outputs", "onnx_outputs"):
        for a, b in zip(getattr(run, side), getattr(loaded, side), strict=True):
            assert (a.seconds, a.notes) == (b.seconds, b.notes)
            assert_same_arrays(a, b)
    assert_same_comparisons(loaded, run)  # stats incl. inf SNR, statuses, messages, profiles
    assert loaded.signature == run.signature
    assert loaded.tolerances == run.tolerances
    assert dict(loaded.environment) == dict(run.environment)
    assert loaded.timings["torch"] == 0.5 and np.isnan(loaded.timings["compare"])
    assert loaded.provenance == run.provenance
    assert loaded.saved is not None and loaded.saved.outputs_kept is True
    assert loaded.verdict == run.verdict == "fail"


def test_json_report_from_saved_run_equals_live_report(tmp_path: Path) -> None:
    run = make_run({"logits": np.linspace(-1, 1, 50, dtype=np.float32).reshape(5, 10)})
    loaded = load_run(save_run(run, tmp_path / "r.parity.npz"))
    assert report_dict(loaded) == report_dict(run)


def test_loaded_profiles_rejudge_exactly_like_the_live_run(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((50, 40)).astype(np.float32)
    onnx = ref + (1e-3 * rng.standard_normal(ref.shape)).astype(np.float32)
    onnx[3, 4] = np.nan
    live = make_run({"logits": ref})
    row = compare_outputs(ref, onnx, name="logits", input_set=0, tolerance=Tolerance())
    live = replace(
        live,
        candidates=(
            replace(
                live.candidates[0], onnx_outputs=(OutputSet({"logits": onnx}),), outputs=(row,)
            ),
        ),
    )
    loaded = load_run(save_run(live, tmp_path / "r.parity.npz"))
    for atol, rtol in [(1e-6, 0.0), (1e-3, 0.0), (1e-2, 1e-2), (10.0, 0.0)]:
        tol = Tolerances(Tolerance(atol, rtol))
        a, b = live.rejudge(tol).comparisons[0], loaded.rejudge(tol).comparisons[0]
        assert (a.status, a.n_mismatch) == (b.status, b.n_mismatch)
    assert loaded.comparisons[0].min_atol_to_pass == live.comparisons[0].min_atol_to_pass
    assert loaded.comparisons[0].status.value == "fail"  # the NaN fails at any tolerance


def test_saved_file_is_a_plain_npz_with_a_schema_manifest(tmp_path: Path) -> None:
    run = make_run({"logits": np.ones((2, 3), np.float32)})
    path = save_run(run, tmp_path / "r.parity.npz")
    with np.load(path, allow_pickle=False) as npz:
        assert "ref/0/0" in npz.files and "inputs/0/0" in npz.files
        np.testing.assert_array_equal(npz["ref/0/0"], run.ref_outputs[0].arrays["logits"])
    manifest = read_manifest(path)
    assert manifest["schema"] == SCHEMA
    assert manifest["model"] == "demo:cnn"
    assert manifest["identity"]["model"] == "demo:cnn"
    assert manifest["saved_by"]["numpy"] == np.__version__
    with zipfile.ZipFile(path) as zf:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
        data = zf.read("ref/0/0.npy")
    assert hashlib.sha256(data).hexdigest() == manifest["members"]["ref/0/0.npy"]["sha256"]


def test_identity_records_content_hash_of_the_onnx_file(tmp_path: Path) -> None:
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"not really onnx, but bytes to hash")
    run = replace(make_run({"y": np.ones(3, np.float32)}), onnx=str(onnx_file))
    manifest = read_manifest(save_run(run, tmp_path / "r.parity.npz"))
    expected = hashlib.sha256(onnx_file.read_bytes()).hexdigest()
    assert manifest["identity"]["onnx_sha256"] == expected


def test_big_outputs_reopen_memory_mapped_and_aligned(tmp_path: Path) -> None:
    big = np.random.default_rng(2).standard_normal((512, 1024)).astype(np.float64)  # 4 MiB
    path = save_run(make_run({"big": big}), tmp_path / "r.parity.npz")
    loaded = load_run(path)
    arr = loaded.ref_outputs[0].arrays["big"]
    assert isinstance(arr.base, np.memmap), "a big member must be mapped, not copied"
    assert not arr.flags.writeable
    assert arr.ctypes.data % 64 == 0 and arr.flags.aligned
    np.testing.assert_array_equal(arr, big)


def test_save_and_load_hold_no_second_copy_of_a_big_output(tmp_path: Path) -> None:
    big = np.ones((32, 1024, 1024), dtype=np.float32)  # 128 MiB: a copy would show
    run = make_run({"small": np.full(3, 0.5, np.float32)})
    run = replace(
        run,
        cases=(replace(run.cases[0], reference=OutputSet({"big": big})),),
        candidates=(
            replace(run.candidates[0], onnx_outputs=(OutputSet({"big": big}),), outputs=()),
        ),
    )
    tracemalloc.start()
    try:
        save_run(run, tmp_path / "big.parity.npz")
        _, save_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        loaded = load_run(tmp_path / "big.parity.npz")
        _, load_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert save_peak < 48 << 20, f"saving copied the output: peak {save_peak >> 20} MiB"
    assert load_peak < 16 << 20, f"loading copied the output: peak {load_peak >> 20} MiB"
    assert float(loaded.onnx_outputs[0].arrays["big"][-1, -1, -1]) == 1.0


def test_keep_outputs_false_writes_a_small_file_without_raw_outputs(tmp_path: Path) -> None:
    run = make_run({"y": np.ones((100, 100), np.float32)})
    loaded = load_run(save_run(run, tmp_path / "r.parity.npz", keep_outputs=False))
    assert loaded.ref_outputs == () and loaded.onnx_outputs == ()
    assert_same_comparisons(loaded, run)
    assert loaded.saved is not None and loaded.saved.outputs_kept is False


def _rewrite_member(path: Path, member: str, transform, *, reseal: bool = True) -> None:
    """Copy the zip with one member's bytes transformed, keeping stored layout.

    `reseal`: a rewritten manifest gets a matching manifest hash (a forger who recomputes
    it), so the checks behind the manifest hash are what the test exercises."""
    with zipfile.ZipFile(path) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
        comment = zf.comment
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for info, data in items:
            if info.filename == member:
                data = transform(data)
                if member == MANIFEST and reseal:
                    digest = hashlib.sha256(data).hexdigest()
                    comment = f"{SCHEMA} {MANIFEST} sha256 {digest}".encode()
            zf.writestr(info, data)
        zf.comment = comment


def test_a_tampered_member_is_refused(tmp_path: Path) -> None:
    path = save_run(make_run({"y": np.full((4, 4), 0.5, np.float32)}), tmp_path / "r.parity.npz")

    def flip_last_byte(data: bytes) -> bytes:
        return data[:-1] + bytes([data[-1] ^ 0x01])

    _rewrite_member(path, "onnx/0/0.npy", flip_last_byte)
    with pytest.raises(SavedRunError, match=r"onnx/0/0\.npy.*altered"):
        load_run(path)


def test_each_input_set_reopens_with_its_own_reference_and_a_short_list_is_refused(
    tmp_path: Path,
) -> None:
    """Reference outputs travel with their input set (InputCase, and its manifest entry); an
    older manifest whose flat ref_outputs has another length than input_sets is refused."""
    a = np.full(3, 0.5, np.float32)
    run = make_run({"y": a})
    [lead] = run.candidates
    run = replace(
        run,
        cases=(*run.cases, replace(run.cases[0], input_set=replace(run.input_sets[0], index=1))),
        candidates=(replace(lead, onnx_outputs=lead.onnx_outputs * 2),),  # one per input set
    )
    path = save_run(run, tmp_path / "r.parity.npz")
    back = load_run(path)
    assert [c.index for c in back.cases] == [0, 1]
    for case in back.cases:
        np.testing.assert_array_equal(case.reference.arrays["y"], a)
    assert len(back.ref_outputs) == 2 and back.exclusion(1, "y") is None
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read(MANIFEST))
    # the flat layout of older manifests, one reference short
    manifest["ref_outputs"] = [manifest["input_sets"][0].pop("reference")]
    del manifest["input_sets"][1]["reference"]
    _rewrite_member(path, MANIFEST, lambda _: json.dumps(manifest).encode())
    with pytest.raises(SavedRunError, match="ref_outputs: 1 output sets for 2 input sets"):
        load_run(path)


def test_a_pickled_member_is_refused_even_with_a_matching_hash(tmp_path: Path) -> None:
    path = save_run(make_run({"y": np.full(3, 0.5, np.float32)}), tmp_path / "r.parity.npz")
    sneaky = tmp_path / "obj.npy"
    np.save(sneaky, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    payload = sneaky.read_bytes()

    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read(MANIFEST))
    manifest["members"]["ref/0/0.npy"]["sha256"] = hashlib.sha256(payload).hexdigest()
    _rewrite_member(path, "ref/0/0.npy", lambda _: payload)
    _rewrite_member(path, MANIFEST, lambda _: json.dumps(manifest).encode())
    with pytest.raises(SavedRunError, match="pickle"):
        load_run(path)


def test_saving_an_object_array_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    run = make_run({"y": np.full(3, 0.5, np.float32)})
    bad = replace(
        run,
        cases=(
            replace(run.cases[0], reference=OutputSet({"y": np.array([None, 1], dtype=object)})),
        ),
    )
    target = tmp_path / "r.parity.npz"
    with pytest.raises(SavedRunError, match="pickle"):
        save_run(bad, target)
    assert list(tmp_path.iterdir()) == []


def test_failed_save_keeps_the_previous_file(tmp_path: Path) -> None:
    run = make_run({"y": np.full(3, 0.5, np.float32)})
    target = save_run(run, tmp_path / "r.parity.npz")
    before = target.read_bytes()
    bad = replace(
        run,
        candidates=(
            replace(
                run.candidates[0],
                onnx_outputs=(OutputSet({"y": np.array(["x", 1], dtype=object)}),),
            ),
        ),
    )
    with pytest.raises(SavedRunError):
        save_run(bad, target)
    assert target.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"\x80\x04\x95 a pickle, not a zip", "not a Parity saved run"),
        (b"", "not a Parity saved run"),
    ],
)
def test_non_zip_files_are_refused_in_one_line(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "bad.parity.npz"
    path.write_bytes(content)
    with pytest.raises(SavedRunError, match=match) as info:
        load_run(path)
    assert "\n" not in str(info.value)


def test_missing_file_zip_without_manifest_and_unknown_schema_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SavedRunError, match="not found"):
        load_run(tmp_path / "absent.parity.npz")

    plain = tmp_path / "plain.npz"
    np.savez(plain, a=np.ones(3))
    with pytest.raises(SavedRunError, match="no manifest.json"):
        load_run(plain)

    path = save_run(make_run({"y": np.full(3, 0.5, np.float32)}), tmp_path / "r.parity.npz")
    _rewrite_member(path, MANIFEST, lambda d: d.replace(b"parity.run/1", b"parity.run/9"))
    with pytest.raises(SavedRunError, match="parity.run/9"):
        load_run(path)


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    path = save_run(make_run({"y": np.full((64, 64), 0.5, np.float32)}), tmp_path / "r.parity.npz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SavedRunError):
        load_run(path)


def test_a_recompressed_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = save_run(make_run({"y": np.full((64, 64), 0.5, np.float32)}), tmp_path / "r.parity.npz")
    with zipfile.ZipFile(path) as zf:
        items = [(i.filename, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in items:
            zf.writestr(name, data)
    with pytest.raises(SavedRunError, match="compressed"):
        load_run(path)


def test_opening_a_saved_run_does_not_import_torch(tmp_path: Path) -> None:
    path = save_run(make_run({"y": np.ones((5, 5), np.float32)}), tmp_path / "r.parity.npz")
    code = (
        "import sys\n"
        "from parity.reports.saved_run import load_run\n"
        "from parity.reports.report import report_dict\n"
        f"run = load_run({str(path)!r})\n"
        "report_dict(run.rejudge(run.tolerances))\n"
        "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not loaded, loaded\n"
        "print(run.verdict, len(run.comparisons))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["fail", "1"]


CONTROLS_PAGE = """
import streamlit as st

from parity.dashboard import state
from parity.dashboard.saved_runs import render_saved_run_controls

with st.sidebar:
    render_saved_run_controls()
run = state.current_run()
st.write(f"current: {run.verdict if run else None}")
"""

DASHBOARD_SCRIPT = f"""
import sys
from streamlit.testing.v1 import AppTest

at = AppTest.from_string({CONTROLS_PAGE!r}, default_timeout=60).run()
at.sidebar.text_input(key="parity_saved_open_path").input(sys.argv[1])
at.sidebar.button(key="parity_saved_open").click().run()
assert not at.exception, at.exception
print(at.main.markdown[-1].value if at.main.markdown else "")
print([c.value for c in at.sidebar.caption])
run = at.session_state["parity_run"]
print(type(run).__name__, len(run.comparisons))
print("torch loaded:", any(m == "torch" or m.startswith("torch.") for m in sys.modules))
at.sidebar.text_input(key="parity_saved_open_path").input(sys.argv[1] + ".missing")
at.sidebar.button(key="parity_saved_open").click().run()
print([c.value for c in at.sidebar.caption])
"""


def test_dashboard_control_opens_a_saved_run_without_torch(tmp_path: Path) -> None:
    path = save_run(make_run({"y": np.ones((5, 5), np.float32)}), tmp_path / "r.parity.npz")
    result = subprocess.run(
        [sys.executable, "-c", DASHBOARD_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert "current: fail" in lines[0]
    assert "Opened" in lines[1]
    assert lines[2] == "ValidationRun 1"
    assert lines[3] == "torch loaded: False"
    assert "Could not open" in lines[4] and "not found" in lines[4]


def test_cli_report_from_a_saved_run_writes_the_live_runs_json(
    tmp_path: Path, model_zoo, tiny_artifacts
) -> None:
    from parity.cli import main

    run_file, live_json, saved_json = (tmp_path / n for n in ("r.parity.npz", "a.json", "b.json"))
    args = ["validate", "--model", model_zoo.spec("make_tiny"), "--onnx", str(tiny_artifacts.onnx)]
    args += ["--input-sets", "2", "--atol", "1e-9", "--save-run", str(run_file)]
    args += ["--json", str(live_json), "--html", str(tmp_path / "a.html")]
    live_rc = main(args)
    saved_rc = main(["report", str(run_file), "--json", str(saved_json)])
    assert live_rc == saved_rc
    assert json.loads(saved_json.read_text()) == json.loads(live_json.read_text())
    assert (tmp_path / "a.html").stat().st_size > 1_000_000  # plotly.js inlined
    assert main(["report", str(run_file), "--atol", "1"]) == 0  # re-judged from the profile
    assert main(["report", str(run_file), "--tol", "no_such_output=1"]) == 2


def test_resaving_a_reopened_run_keeps_its_identity_hashes(tmp_path: Path) -> None:
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"bytes standing in for a model")
    run = replace(make_run({"y": np.ones(3, np.float32)}), onnx=str(onnx_file))
    first = save_run(run, tmp_path / "a.parity.npz")
    onnx_file.unlink()  # the model is gone; the saved run must still say what it was
    second = save_run(load_run(first), tmp_path / "b.parity.npz")
    a, b = read_manifest(first)["identity"], read_manifest(second)["identity"]
    assert (
        b["onnx_sha256"]
        == a["onnx_sha256"]
        == hashlib.sha256(b"bytes standing in for a model").hexdigest()
    )
    assert_same_comparisons(load_run(second), run)
