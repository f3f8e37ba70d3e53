"""Reference-only validation: REF.npz layouts, their errors, and equality with a live run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parity.errors import InputError, UsageError
from parity.results import InputSet, OutputSet, ValidationRun
from parity.run.reference import load_reference_outputs, save_input_feeds, save_reference_outputs
from parity.signature import OnnxSignature, TensorSpec
from parity.tolerances import Tolerances

SIG = OnnxSignature(
    inputs=(TensorSpec("x", "float32", ("batch", 4)),),
    outputs=(TensorSpec("logits", "float32", ("batch", 3)), TensorSpec("aux", "int64", (2,))),
    opset=18,
    producer="pytorch",
    ir_version=9,
)
RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((2, 3)).astype(np.float32)
AUX = np.array([4, 5], dtype=np.int64)


def test_single_set_layout_reads_outputs_by_onnx_name_in_onnx_order(tmp_path: Path) -> None:
    path = tmp_path / "ref.npz"
    np.savez(path, aux=AUX, logits=LOGITS)
    (only,) = load_reference_outputs(path, signature=SIG, n_sets=1)
    assert list(only.arrays) == ["logits", "aux"]
    np.testing.assert_array_equal(only.arrays["logits"], LOGITS)
    assert only.arrays["aux"].dtype == np.int64


def test_multi_set_layout_groups_keys_by_set_number(tmp_path: Path) -> None:
    path = tmp_path / "ref.npz"
    arrays = {f"set{i}/{n}": a + i for i in range(3) for n, a in (("logits", LOGITS), ("aux", AUX))}
    np.savez(path, **arrays)
    sets = load_reference_outputs(path, signature=SIG, n_sets=3)
    assert len(sets) == 3
    for i, s in enumerate(sets):
        np.testing.assert_array_equal(s.arrays["logits"], LOGITS + i)


def test_extra_reference_outputs_are_kept_after_the_onnx_ones(tmp_path: Path) -> None:
    path = tmp_path / "ref.npz"
    np.savez(path, logits=LOGITS, aux=AUX, **{"out.2": np.zeros(2)})
    (only,) = load_reference_outputs(path, signature=SIG, n_sets=1)
    assert list(only.arrays) == ["logits", "aux", "out.2"]


def test_missing_output_is_an_input_error_naming_it_and_what_was_found(tmp_path: Path) -> None:
    path = tmp_path / "ref.npz"
    np.savez(path, logit=LOGITS, aux=AUX)
    with pytest.raises(InputError, match=r"no reference for ONNX output 'logits' \(found 'logit'"):
        load_reference_outputs(path, signature=SIG, n_sets=1)


def test_missing_output_in_one_set_names_the_set(tmp_path: Path) -> None:
    path = tmp_path / "ref.npz"
    np.savez(path, **{"set0/logits": LOGITS, "set0/aux": AUX, "set1/logits": LOGITS})
    with pytest.raises(InputError, match="set 1 of .*'aux'"):
        load_reference_outputs(path, signature=SIG, n_sets=2)


def test_set_count_must_match_the_number_of_input_files(tmp_path: Path) -> None:
    path = tmp_path / "ref.npz"
    np.savez(path, logits=LOGITS, aux=AUX)
    with pytest.raises(UsageError, match="holds 1 input set, but 2 input sets were given"):
        load_reference_outputs(path, signature=SIG, n_sets=2)


def test_gaps_in_set_numbers_and_mixed_layouts_are_refused(tmp_path: Path) -> None:
    gap = tmp_path / "gap.npz"
    np.savez(gap, **{"set0/logits": LOGITS, "set0/aux": AUX, "set2/logits": LOGITS})
    with pytest.raises(InputError, match=r"set numbers \[0, 2\]"):
        load_reference_outputs(gap, signature=SIG, n_sets=2)
    mixed = tmp_path / "mixed.npz"
    np.savez(mixed, **{"set0/logits": LOGITS, "aux": AUX})
    with pytest.raises(InputError, match="mixes"):
        load_reference_outputs(mixed, signature=SIG, n_sets=1)


def test_an_output_literally_named_like_a_set_key_reads_as_single_set(tmp_path: Path) -> None:
    sig = OnnxSignature((), (TensorSpec("set0/y", "float32", (2,)),), 18, "x", 9)
    path = tmp_path / "ref.npz"
    np.savez(path, **{"set0/y": np.ones(2, np.float32)})
    (only,) = load_reference_outputs(path, signature=sig, n_sets=1)
    assert list(only.arrays) == ["set0/y"]


@pytest.mark.parametrize(
    ("write", "error", "match"),
    [
        (lambda p: p.write_bytes(b"garbage"), InputError, "not an .npz file"),
        (lambda p: p.write_bytes(b"PK\x03\x04broken"), InputError, "not a readable .npz"),
        (lambda p: np.save(p.with_suffix(".npy"), LOGITS) or p.with_suffix(".npy").rename(p),
         InputError, "single .npy"),
        (lambda p: np.savez(p, logits=np.array([object()], dtype=object), aux=AUX),
         InputError, "pickle"),
        (lambda p: np.savez(p), InputError, "holds no arrays"),
    ],
    ids=["garbage", "truncated-zip", "npy", "pickled", "empty"],
)  # fmt: skip
def test_unreadable_reference_files_are_refused(tmp_path: Path, write, error, match) -> None:
    path = tmp_path / "ref.npz"
    write(path)
    with pytest.raises(error, match=match) as info:
        load_reference_outputs(path, signature=SIG, n_sets=1)
    assert "\n" not in str(info.value)


def test_absent_reference_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not found"):
        load_reference_outputs(tmp_path / "nope.npz", signature=SIG, n_sets=1)


def _run(n_sets: int) -> ValidationRun:
    refs = tuple(OutputSet({"logits": LOGITS + i, "aux": AUX}) for i in range(n_sets))
    sets = tuple(InputSet(i, {"x": np.full((2, 4), i, np.float32)}) for i in range(n_sets))
    return ValidationRun.from_rows(
        model="m", onnx="m.onnx", signature=SIG, tolerances=Tolerances(), environment={},
        input_sets=sets, outputs=(), ref_outputs=refs,
    )  # fmt: skip


@pytest.mark.parametrize("n_sets", [1, 3])
def test_saved_reference_round_trips_through_the_loader(tmp_path: Path, n_sets: int) -> None:
    run = _run(n_sets)
    path = save_reference_outputs(tmp_path / "ref.npz", run)
    loaded = load_reference_outputs(path, signature=SIG, n_sets=n_sets)
    for a, b in zip(run.ref_outputs, loaded, strict=True):
        assert list(a.arrays) == list(b.arrays)
        for name in a.arrays:
            np.testing.assert_array_equal(a.arrays[name], b.arrays[name])
            assert a.arrays[name].dtype == b.arrays[name].dtype
    feeds = save_input_feeds(tmp_path, run)
    assert [p.name for p in feeds] == [f"feeds{i}.npz" for i in range(n_sets)]
    with np.load(feeds[-1], allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["x"], run.input_sets[-1].feeds["x"])


def test_saving_a_run_without_reference_outputs_is_a_usage_error(tmp_path: Path) -> None:
    run = _run(1)
    from dataclasses import replace

    with pytest.raises(UsageError, match="no reference outputs"):
        kept_none = replace(run, cases=tuple(replace(c, reference=None) for c in run.cases))
        save_reference_outputs(tmp_path / "ref.npz", kept_none)


def test_reference_only_validation_gives_the_numbers_of_the_live_run(
    tmp_path: Path, model_zoo, tiny_artifacts
) -> None:
    from parity.pipeline import RunConfig, run_validation
    from parity.reports.report import report_dict

    live = run_validation(
        RunConfig(
            model=model_zoo.spec("make_tiny"),
            onnx=str(tiny_artifacts.onnx),
            n_input_sets=2,
            seed=3,
            tolerances=Tolerances.from_json({"default": {"atol": 1e-7, "rtol": 0.0}}),
        )
    )
    ref = save_reference_outputs(tmp_path / "ref.npz", live)
    feeds = save_input_feeds(tmp_path, live)
    offline = run_validation(
        RunConfig(
            model=None,
            onnx=str(tiny_artifacts.onnx),
            input_files=tuple(str(p) for p in feeds),
            reference_file=str(ref),
            tolerances=live.tolerances,
        )
    )
    assert len(offline.comparisons) == len(live.comparisons) == 2
    assert report_dict(offline)["outputs"] == report_dict(live)["outputs"]  # every number
    assert offline.model.startswith("reference:")


def test_saved_run_identity_records_weights_and_reference_files(
    tmp_path: Path, model_zoo, tiny_artifacts
) -> None:
    # Before: the identity looked these up under `extra` keys nothing wrote, so neither a
    # weights file nor a reference file ever reached a saved run.
    from parity.files.hashing import file_sha256
    from parity.pipeline import RunConfig, run_validation
    from parity.reports.saved_run import load_run, save_run

    weights = str(tiny_artifacts.state_safetensors)
    live = run_validation(
        RunConfig(model=model_zoo.spec("make_tiny"), onnx=str(tiny_artifacts.onnx), weights=weights)
    )
    identity = load_run(save_run(live, tmp_path / "live.parity.npz")).saved.identity
    assert identity["weights"] == weights
    assert identity["weights_sha256"] == file_sha256(Path(weights))

    ref = save_reference_outputs(tmp_path / "ref.npz", live)
    feeds = save_input_feeds(tmp_path, live)
    offline = run_validation(
        RunConfig(
            model=None,
            onnx=str(tiny_artifacts.onnx),
            input_files=tuple(str(p) for p in feeds),
            reference_file=str(ref),
        )
    )
    reopened = load_run(save_run(offline, tmp_path / "offline.parity.npz"))
    assert reopened.saved.identity["reference_file"] == str(ref)
    assert reopened.saved.identity["reference_file_sha256"] == file_sha256(ref)
    assert reopened.provenance.reference_file == str(ref)
