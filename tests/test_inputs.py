"""Input sets: deterministic, sized by the documented rules, and bad feeds named precisely."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parity.errors import InputError, UsageError
from parity.load.onnx_model import load_onnx
from parity.run.inputs import (
    DEFAULT_INT_RANGE,
    check_feeds,
    default_dim_size,
    grown_dim_size,
    is_mask_input,
    load_input_files,
    make_input_sets,
)
from parity.signature import OnnxSignature, TensorSpec


def _sig(*inputs: TensorSpec) -> OnnxSignature:
    return OnnxSignature(
        inputs=inputs,
        outputs=(TensorSpec("out", "float32", ("batch",)),),
        opset=17,
        producer="test",
        ir_version=8,
    )


IMAGE = _sig(
    TensorSpec("pixels", "float32", ("batch", 3, "height", "width")),
    TensorSpec("scale", "float16", ("batch", None)),
)
TEXT = _sig(
    TensorSpec("input_ids", "int64", ("batch", "seq")),
    TensorSpec("attention_mask", "int64", ("batch", "seq")),
    TensorSpec("flags", "bool", ("batch",)),
)


def test_same_seed_same_inputs_other_seed_other_inputs() -> None:
    a = make_input_sets(IMAGE, n_sets=2, seed=3)
    b = make_input_sets(IMAGE, n_sets=2, seed=3)
    c = make_input_sets(IMAGE, n_sets=2, seed=4)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.feeds["pixels"], y.feeds["pixels"])
    assert not np.array_equal(a[0].feeds["pixels"], c[0].feeds["pixels"])


def test_a_set_is_the_same_whatever_the_number_of_sets() -> None:
    one = make_input_sets(TEXT, n_sets=1, seed=7)[0]
    three = make_input_sets(TEXT, n_sets=3, seed=7)[0]
    np.testing.assert_array_equal(one.feeds["input_ids"], three.feeds["input_ids"])


def test_default_sizes_by_dim_name() -> None:
    assert default_dim_size("batch") == default_dim_size("batch_size") == 2
    assert default_dim_size("sequence_length") == default_dim_size("seq") == 16
    assert default_dim_size("height") == default_dim_size("width") == 32
    assert default_dim_size("channels") == default_dim_size(None) == 8


def test_growth_rule_keeps_divisibility() -> None:
    assert [grown_dim_size(224, k) for k in range(3)] == [224, 256, 288]
    assert [grown_dim_size(2, k) for k in range(3)] == [2, 4, 6]
    assert [grown_dim_size(16, k) for k in range(3)] == [16, 32, 48]
    assert [grown_dim_size(3, k) for k in range(3)] == [3, 4, 5]
    assert [grown_dim_size(128, k) for k in range(3)] == [128, 160, 192]  # step capped at 32


def test_symbolic_dims_grow_across_sets_and_fixed_dims_never_change() -> None:
    sets = make_input_sets(IMAGE, dims={"height": 224}, n_sets=3)
    shapes = [s.feeds["pixels"].shape for s in sets]
    assert shapes == [(2, 3, 224, 32), (4, 3, 256, 64), (6, 3, 288, 96)]
    assert [s.feeds["scale"].shape for s in sets] == [(2, 8), (4, 16), (6, 24)]
    assert sets[1].label == "set 1: batch=4, height=256, width=64"


def test_one_dim_name_means_one_size_in_every_input() -> None:
    s = make_input_sets(TEXT, dims={"seq": 5}, n_sets=2)[1]
    assert s.feeds["input_ids"].shape == s.feeds["attention_mask"].shape == (4, 6)
    assert s.feeds["flags"].shape == (4,)
    assert s.label == "set 1: batch=4, seq=6"


def test_dtypes_values_and_masks() -> None:
    sig = _sig(
        TensorSpec("x16", "float16", (64,)),
        TensorSpec("xbf", "bfloat16", (64,)),
        TensorSpec("ids", "int32", (2000,)),
        TensorSpec("flags", "bool", (2000,)),
        TensorSpec("padding_mask", "bool", (9,)),
        TensorSpec("attention_mask", "float32", (9,)),
    )
    feeds = make_input_sets(sig)[0].feeds
    assert {n: a.dtype.name for n, a in feeds.items()} == {
        "x16": "float16",
        "xbf": "bfloat16",
        "ids": "int32",
        "flags": "bool",
        "padding_mask": "bool",
        "attention_mask": "float32",
    }
    assert 0.5 < float(np.std(feeds["x16"].astype(np.float64))) < 1.5
    low, high = DEFAULT_INT_RANGE
    assert feeds["ids"].min() >= low and feeds["ids"].max() < high
    assert len(np.unique(feeds["ids"])) > 50
    assert 0.3 < feeds["flags"].mean() < 0.7
    assert feeds["padding_mask"].all() and (feeds["attention_mask"] == 1).all()


def test_int_ranges_override_including_masks() -> None:
    feeds = make_input_sets(
        TEXT, dims={"seq": 200}, int_ranges={"input_ids": (5, 8), "attention_mask": (0, 2)}
    )[0].feeds
    assert set(np.unique(feeds["input_ids"])) == {5, 6, 7}
    assert set(np.unique(feeds["attention_mask"])) == {0, 1}


def test_is_mask_input_is_the_rule_the_generator_follows() -> None:
    """One rule for "a mask gets ones" (the Run page offers no integer range for such an
    input because of it): the generated values follow is_mask_input, in any case."""
    names = ["Attention_MASK", "maskless_ids", "input_ids", "token_type_ids", "kmask"]
    sig = _sig(*(TensorSpec(n, "int64", (300,)) for n in names))
    feeds = make_input_sets(sig)[0].feeds
    for name in names:
        assert is_mask_input(name) == bool((feeds[name] == 1).all()), name
    assert [n for n in names if is_mask_input(n)] == ["Attention_MASK", "maskless_ids", "kmask"]


def test_small_integer_dtypes_stay_in_range() -> None:
    sig = _sig(TensorSpec("b", "uint8", (500,)), TensorSpec("c", "int8", (500,)))
    feeds = make_input_sets(sig)[0].feeds
    assert feeds["b"].max() < 100 and feeds["c"].min() >= 0


def test_unknown_dim_name_lists_the_symbolic_dims() -> None:
    with pytest.raises(UsageError) as exc:
        make_input_sets(IMAGE, dims={"seq": 4})
    assert "batch, height, width" in str(exc.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"int_ranges": {"nope": (0, 1)}}, "input_ids, attention_mask, flags"),
        ({"int_ranges": {"flags": (0, 1)}}, "not an integer"),
        ({"int_ranges": {"input_ids": (5, 5)}}, "low < high"),
        ({"dims": {"batch": 0}}, ">= 1"),
        ({"n_sets": 0}, "at least 1"),
        ({"seed": -1}, ">= 0"),
    ],
)
def test_bad_options_are_usage_errors(kwargs: dict, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        make_input_sets(TEXT, **kwargs)


def test_inputs_for_a_real_export(tokens_onnx: Path) -> None:
    sig = load_onnx(tokens_onnx).signature
    sets = make_input_sets(sig, n_sets=2)
    assert sets[0].shapes() == {"input_ids": (2, 16), "attention_mask": (2, 16)}
    assert sets[1].shapes()["input_ids"] == (4, 32)
    for s in sets:
        check_feeds(s.feeds, sig, where=s.label)


# --- the user's own feeds -----------------------------------------------------------------


def _good_feeds() -> dict[str, np.ndarray]:
    return {
        "input_ids": np.zeros((2, 5), np.int64),
        "attention_mask": np.ones((2, 5), np.int64),
        "flags": np.zeros((2,), bool),
    }


def test_npz_files_become_one_set_each(tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        feeds = _good_feeds()
        feeds["input_ids"] = feeds["input_ids"] + i
        paths.append(tmp_path / f"feeds{i}.npz")
        np.savez(paths[-1], **feeds)
    sets = load_input_files(paths, TEXT)
    assert [s.index for s in sets] == [0, 1]
    assert sets[1].label == "set 1: feeds1.npz"
    assert (sets[1].feeds["input_ids"] == 1).all()


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            lambda f: f.update(extra=np.zeros(2)),
            "unknown input 'extra'; the ONNX model's inputs are input_ids, attention_mask, flags",
        ),
        (lambda f: f.pop("flags"), "input 'flags' is missing"),
        (lambda f: f.update(input_ids=np.zeros((2, 5, 1), np.int64)), "'input_ids' has rank 3"),
        (
            lambda f: f.update(input_ids=np.zeros((2, 5), np.int32)),
            "'input_ids' has dtype int32, expected int64",
        ),
        (
            lambda f: f.update(attention_mask=np.ones((2, 6), np.int64)),
            "'attention_mask' has seq=6 at axis 1, but input 'input_ids' has seq=5",
        ),
    ],
)
def test_each_bad_feed_names_the_input(tmp_path: Path, change, needle: str) -> None:
    feeds = _good_feeds()
    change(feeds)
    path = tmp_path / "bad.npz"
    np.savez(path, **feeds)
    with pytest.raises(InputError) as exc:
        load_input_files([path], TEXT)
    assert str(exc.value).startswith(f"inputs file {path}: ")
    assert needle in str(exc.value)


def test_fixed_dim_of_wrong_size_is_named() -> None:
    feeds = {"pixels": np.zeros((2, 4, 8, 8), np.float32), "scale": np.zeros((2, 1), np.float16)}
    with pytest.raises(InputError, match="'pixels' has size 4 at axis 1, expected 3"):
        check_feeds(feeds, IMAGE, where="set 0")


def test_object_arrays_are_refused_without_unpickling(tmp_path: Path) -> None:
    path = tmp_path / "objects.npz"
    np.savez(path, input_ids=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="'input_ids' holds Python objects"):
        load_input_files([path], TEXT)


def test_not_an_npz_and_missing_file(tmp_path: Path) -> None:
    npy = tmp_path / "one.npy"
    np.save(npy, np.zeros(3))
    with pytest.raises(InputError, match="not an .npz archive"):
        load_input_files([npy], TEXT)
    with pytest.raises(InputError, match="no such file"):
        load_input_files([tmp_path / "none.npz"], TEXT)


def test_float_ranges_draw_uniformly_per_input_or_for_every_float_input() -> None:
    every = make_input_sets(IMAGE, float_range=(2.0, 3.0))[0]
    for name in ("pixels", "scale"):
        a = np.asarray(every.feeds[name], np.float64)
        assert a.min() >= 2.0 and a.max() <= 3.0 and a.std() > 0.2
    assert "pixels uniform in [2, 3] (--float-range)" in every.label
    one = make_input_sets(IMAGE, float_range=(2.0, 3.0), float_ranges={"pixels": (-1.0, 0.0)})[0]
    assert one.feeds["pixels"].max() <= 0.0 and one.feeds["scale"].min() >= 2.0
    plain = make_input_sets(IMAGE)[0]  # the default stays standard normal
    assert plain.feeds["pixels"].min() < -2 and "uniform" not in plain.label


def test_a_quantized_input_is_generated_within_its_calibrated_range() -> None:
    from dataclasses import replace

    from parity.signature import Calibrated

    c = Calibrated("pixels", -1.0, 0.9921875, 1 / 128, 0)
    sig = replace(IMAGE, calibrated=(c,))
    s = make_input_sets(sig, dims={"height": 64, "width": 64})[0]
    pixels = s.feeds["pixels"]
    assert pixels.min() >= -1.0 and pixels.max() <= 0.9921875
    assert pixels.max() > 0.95 and pixels.min() < -0.95  # the whole range, not a corner
    assert "pixels uniform in [-1, 0.9922] (the calibrated range of its QuantizeLinear)" in (
        s.label
    )
    assert s.feeds["scale"].min() < -1.5  # not quantized: standard normal
    user = make_input_sets(sig, float_range=(0.0, 0.5))[0]  # the user's range wins
    assert user.feeds["pixels"].max() <= 0.5 and "--float-range" in user.label


def test_clipping_notes_count_what_the_quantizer_clips() -> None:
    from parity.results import InputSet
    from parity.run.inputs import with_clipping_notes
    from parity.signature import Calibrated

    c = Calibrated("x", -1.0, 1.0, 0.01, 0)
    x = np.array([-2.0, -1.004, -1.006, 0.0, 1.004, 1.2, np.nan], np.float32)
    (s,) = with_clipping_notes([InputSet(0, {"x": x}, "set 0: f.npz")], [c])
    assert s.label.startswith("set 0: f.npz; x: 3 of 7 elements (42.9%) outside")
    (inside,) = with_clipping_notes([InputSet(0, {"x": x[3:5]}, "set 0")], [c])
    assert inside.label == "set 0"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"float_ranges": {"nope": (0.0, 1.0)}}, "float inputs: pixels, scale"),
        ({"float_range": (1.0, 1.0)}, "LO < HI"),
        ({"float_range": (0.0, float("inf"))}, "finite"),
    ],
)
def test_bad_float_ranges_are_usage_errors(kwargs: dict, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        make_input_sets(IMAGE, **kwargs)
    with pytest.raises(UsageError, match="not a float"):
        make_input_sets(TEXT, float_ranges={"input_ids": (0.0, 1.0)})


def test_float_range_flag_parsing_and_refusals(tmp_path: Path, capsys) -> None:
    from parity.cli import main, parse_float_ranges

    assert parse_float_ranges(["-1:1", "x=0:2.5"]) == ((-1.0, 1.0), {"x": (0.0, 2.5)})
    for bad, needle in [
        (["1:0"], "LO < HI"),
        (["a:b"], "expected numbers LO:HI"),
        (["x=1"], "--float-range x: expected numbers"),
        (["1:2", "3:4"], "one LO:HI for every input"),
    ]:
        with pytest.raises(UsageError, match=needle):
            parse_float_ranges(bad)
    np.savez(tmp_path / "f.npz", x=np.zeros((2, 8), np.float32))
    code = main(["validate", "--model", "demo:cnn", "--inputs", str(tmp_path / "f.npz"),
                 "--float-range=0:1"])  # fmt: skip
    assert code == 2
    assert "--float-range does not apply with --inputs" in capsys.readouterr().err


def test_the_api_float_range_keyword() -> None:
    import parity

    run = parity.validate("demo:cnn", float_range=(0.0, 0.5))
    (x,) = run.input_sets[0].feeds.values()
    assert x.min() >= 0.0 and x.max() <= 0.5
    with pytest.raises(UsageError, match=r"^float_range=nope: the ONNX model has no input"):
        parity.validate("demo:cnn", float_range={"nope": (0.0, 1.0)})
