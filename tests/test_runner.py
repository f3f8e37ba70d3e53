"""Running both sides: inputs reach torch the right way, outputs get the right ONNX names."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from parity.errors import InputError, ModelRunError, OnnxRunError
from parity.load.onnx_model import load_onnx, make_session
from parity.load.torch_model import TorchModel, load_torch_model
from parity.results import InputSet
from parity.run.inputs import make_input_sets
from parity.run.runner import (
    flatten_outputs,
    match_outputs,
    pair_outputs,
    run_onnx,
    run_torch,
)
from parity.signature import OnnxSignature, TensorSpec


def _sig(inputs: list[TensorSpec], outputs: list[str]) -> OnnxSignature:
    return OnnxSignature(
        inputs=tuple(inputs),
        outputs=tuple(TensorSpec(n, "float32", ()) for n in outputs),
        opset=17,
        producer="test",
        ir_version=8,
    )


def test_tiny_model_agrees_with_onnx_at_every_set(tiny_artifacts, model_zoo) -> None:
    onnx_model = load_onnx(tiny_artifacts.onnx)
    session = make_session(onnx_model)
    model = load_torch_model(model_zoo.spec("make_tiny"))
    for input_set in make_input_sets(onnx_model.signature, n_sets=3):
        ref = run_torch(model, input_set, onnx_model.signature)
        got = run_onnx(session, input_set, signature=onnx_model.signature)
        assert list(ref.arrays) == list(got.arrays) == ["y"]
        assert ref.arrays["y"].shape == (2 * (input_set.index + 1), 3)
        np.testing.assert_allclose(ref.arrays["y"], got.arrays["y"], atol=1e-5)
        assert ref.seconds > 0 and got.seconds > 0


def test_nested_dict_outputs_match_dynamo_export_by_name_then_position(
    tokens_onnx: Path, model_zoo
) -> None:
    onnx_model = load_onnx(tokens_onnx)
    session = make_session(onnx_model)
    model = load_torch_model(model_zoo.spec("make_tokens"))
    assert model.parameter_names == onnx_model.signature.input_names  # keyword path
    for input_set in make_input_sets(onnx_model.signature, n_sets=2):
        ref = run_torch(model, input_set, onnx_model.signature)
        got = run_onnx(session, input_set)  # signature read from the session
        assert list(ref.arrays) == ["logits", "sum", "scaled"]
        for name in ref.arrays:
            assert ref.arrays[name].shape == got.arrays[name].shape
            np.testing.assert_allclose(ref.arrays[name], got.arrays[name], atol=1e-5)


def test_flatten_walks_every_container_in_order_and_skips_non_tensors() -> None:
    @dataclass
    class Out:
        last_hidden: torch.Tensor
        pooled: torch.Tensor | None
        steps: int

    Pair = namedtuple("Pair", ["left", "right"])
    t = torch.zeros(1)
    result = (
        t,
        {"logits": t, "cache": None, "hidden": [t, (t, 3)]},
        Out(last_hidden=t, pooled=None, steps=2),
        Pair(left=t, right="text"),
    )
    leaves = flatten_outputs(result)
    assert [leaf.path for leaf in leaves] == [
        "0",
        "1.logits",
        "1.hidden.0",
        "1.hidden.1.0",
        "2.last_hidden",
        "3.left",
    ]
    assert [leaf.named for leaf in leaves] == [False, True, True, True, True, True]
    assert [leaf.path for leaf in flatten_outputs(t)] == ["0"]
    assert [leaf.path for leaf in flatten_outputs({"logits": t})] == ["logits"]


def test_names_match_first_then_positions_and_extras_keep_their_path() -> None:
    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    leaves = flatten_outputs({"hidden": a, "logits": b, "aux": (c, d)})
    matched = match_outputs(leaves, ["logits", "out1", "out2"])
    assert list(matched) == ["logits", "out1", "out2", "torch:aux.1"]
    assert matched["logits"] is b
    assert matched["out1"] is a
    assert matched["out2"] is c
    assert matched["torch:aux.1"] is d


def test_outputs_named_otherwise_pair_by_order_and_shape_in_one_line() -> None:
    """An Olive file names BERT's pooler output `tanh`: the ONNX outputs no name claims take
    torch's outputs left by order and shape (a later leaf of the declared shape before an
    earlier one that does not fit), and the pairing is said in one line."""
    hidden, pooled, extra = torch.zeros(2, 5, 8), torch.ones(2, 8), torch.ones(3)
    leaves = flatten_outputs({"last_hidden_state": hidden, "extra": extra, "pooler": pooled})
    specs = [
        TensorSpec("last_hidden_state", "float32", ("batch", "sequence", 8)),
        TensorSpec("tanh", "float32", ("batch", 8)),
    ]
    matched, note = pair_outputs(leaves, specs)
    assert list(matched) == ["last_hidden_state", "tanh", "torch:extra"]
    assert matched["tanh"] is pooled
    assert note == (
        "outputs named otherwise than torch's, paired by order and shape: "
        "ONNX 'tanh' is torch's 'pooler'"
    )
    assert pair_outputs(leaves[:1], specs[:1])[1] == ""  # names alone: nothing to say


def test_index_paths_never_match_numeric_onnx_names_by_name() -> None:
    a, b = torch.zeros(1), torch.ones(1)
    matched = match_outputs(flatten_outputs((a, b)), ["1", "0"])
    assert matched["1"] is a and matched["0"] is b  # by position, as the export ordered them


def test_fewer_torch_outputs_leave_onnx_outputs_unmatched() -> None:
    matched = match_outputs(flatten_outputs(torch.zeros(1)), ["y", "z"])
    assert list(matched) == ["y"]


class Subtract(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a - b


def _subtract_model(parameter_names: tuple[str, ...]) -> TorchModel:
    return TorchModel("test", "factory", Subtract().eval(), parameter_names, "0")


def test_inputs_go_by_keyword_when_onnx_names_are_forward_parameters() -> None:
    sig = _sig([TensorSpec("b", "float32", (2,)), TensorSpec("a", "float32", (2,))], ["out"])
    feeds = {"b": np.array([1.0, 2.0], np.float32), "a": np.array([10.0, 20.0], np.float32)}
    out = run_torch(_subtract_model(("a", "b")), InputSet(0, feeds), sig)
    np.testing.assert_array_equal(out.arrays["out"], [9.0, 18.0])  # a - b, not b - a


def test_inputs_go_by_position_when_names_differ() -> None:
    sig = _sig([TensorSpec("x0", "float32", (2,)), TensorSpec("x1", "float32", (2,))], ["out"])
    feeds = {"x0": np.array([1.0, 2.0], np.float32), "x1": np.array([10.0, 20.0], np.float32)}
    out = run_torch(_subtract_model(("a", "b")), InputSet(0, feeds), sig)
    np.testing.assert_array_equal(out.arrays["out"], [-9.0, -18.0])  # x0 - x1


def test_torch_never_writes_into_the_shared_feeds() -> None:
    class InPlace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mul_(2)

    feeds = {"x": np.ones(3, np.float32)}
    sig = _sig([TensorSpec("x", "float32", (3,))], ["y"])
    model = TorchModel("test", "factory", InPlace(), ("x",), "0")
    out = run_torch(model, InputSet(0, feeds), sig)
    np.testing.assert_array_equal(out.arrays["y"], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(feeds["x"], [1.0, 1.0, 1.0])


def test_bfloat16_outputs_become_float32_with_a_note() -> None:
    class ToBf16(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.to(torch.bfloat16)

    sig = _sig([TensorSpec("x", "float32", (3,))], ["y"])
    model = TorchModel("test", "factory", ToBf16(), ("x",), "0")
    out = run_torch(model, InputSet(0, {"x": np.array([1.0, 2.5, -3.0], np.float32)}), sig)
    assert out.arrays["y"].dtype == np.float32
    np.testing.assert_array_equal(out.arrays["y"], [1.0, 2.5, -3.0])
    assert out.notes == ("torch output 'y': bfloat16 compared as float32",)


def test_model_raising_at_run_time_names_the_set(model_zoo) -> None:
    model = load_torch_model(model_zoo.spec("make_raising"))
    sig = _sig([TensorSpec("x", "float32", ("batch", 4))], ["y"])
    sets = make_input_sets(sig, n_sets=2)
    assert run_torch(model, sets[0], sig).arrays["y"].shape == (2, 3)
    with pytest.raises(ModelRunError) as exc:
        run_torch(model, sets[1], sig)
    assert str(exc.value) == (
        "torch model raised RuntimeError on input set 1: batch too big for this model"
    )


def test_onnx_runtime_failure_names_the_set(tmp_path: Path) -> None:
    # Reshape to a constant [2, 6]: fine at batch 2, impossible at batch 4.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])
    shape = numpy_helper.from_array(np.array([2, 6], np.int64), name="shape")
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    graph = helper.make_graph([node], "reshape", [x], [y], initializer=[shape])
    path = tmp_path / "reshape.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_onnx(path)
    session = make_session(model)
    sets = make_input_sets(model.signature, n_sets=2)
    assert run_onnx(session, sets[0]).arrays["y"].shape == (2, 6)
    with pytest.raises(OnnxRunError) as exc:
        run_onnx(session, sets[1])
    message = str(exc.value)
    assert message.startswith("ONNX Runtime failed on input set 1: ")
    assert "\n" not in message
    assert "Reshape" in exc.value.detail  # ORT's whole text, for the folded details


def test_bad_feeds_are_caught_before_onnx_runtime(tiny_artifacts) -> None:
    session = make_session(load_onnx(tiny_artifacts.onnx))
    bad = InputSet(2, {"x": np.zeros((2, 4, 1), np.float32)})
    with pytest.raises(InputError, match="input set 2: input 'x' has rank 3"):
        run_onnx(session, bad)
    wrong_name = InputSet(0, {"pixels": np.zeros((2, 4), np.float32)})
    with pytest.raises(InputError, match="unknown input 'pixels'"):
        run_onnx(session, wrong_name)


def test_bfloat16_feeds_and_outputs_run_on_both_sides(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["n"])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "same", [x], [y])
    path = tmp_path / "bf16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_onnx(path)
    input_set = make_input_sets(model.signature)[0]
    assert input_set.feeds["x"].dtype.name == "bfloat16"

    got = run_onnx(make_session(model), input_set)
    assert got.arrays["y"].dtype == np.float32
    assert got.notes == ("onnx output 'y': bfloat16 compared as float32",)

    class Same(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert x.dtype == torch.bfloat16
            return x.clone()

    ref = run_torch(TorchModel("t", "factory", Same(), ("x",), "0"), input_set, model.signature)
    want = input_set.feeds["x"].astype(np.float32)
    assert np.abs(want).max() > 0
    np.testing.assert_array_equal(ref.arrays["y"], want)
    np.testing.assert_array_equal(got.arrays["y"], want)


def test_fp16_feeds_to_a_float32_model_are_the_same_values_widened():
    """A file converted with float16 inputs (keep_io_types=False): torch gets the same
    values in its own float32, so it computes what the file was converted from."""
    module = torch.nn.Linear(4, 2).eval()
    model = TorchModel(spec="x", kind="factory", module=module, parameter_names=("input",),
                       sha256="0")  # fmt: skip
    signature = OnnxSignature(
        inputs=(TensorSpec("input", "float16", (2, 4)),),
        outputs=(TensorSpec("y", "float16", (2, 2)),),
        opset=17, producer="test", ir_version=8,
    )  # fmt: skip
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float16)
    got = run_torch(model, InputSet(0, {"input": x}), signature)
    (y,) = got.arrays.values()
    assert y.dtype == np.float32
    with torch.no_grad():
        want = module(torch.from_numpy(x.astype(np.float32))).numpy()
    np.testing.assert_array_equal(y, want)
