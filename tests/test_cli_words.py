"""Words of the command line a newcomer can act on (issue 37): a misspelled flag or command is
answered in one line with the one meant, exit 2."""

from __future__ import annotations

import functools
import json

import pytest

from parity.cli import main


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["validate", "--model", "demo:cnn", "--input-set", "2"], "--input-sets"),
        (["validate", "--model", "demo:cnn", "--layer"], "--layers"),
        (["validate", "--model", "demo:cnn", "--noisefloor"], "--noise-floor"),
        (["validate", "--model", "demo:cnn", "--input-set=3"], "--input-sets"),
        (["dashboard", "--model", "demo:cnn", "--layer"], "--layers"),
        (["report", "r.parity.npz", "--jsn", "r.json"], "--json"),
    ],
)
def test_a_misspelled_flag_gets_one_line_naming_the_flag_meant(capsys, argv, meant):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and "usage:" not in err, err
    assert err.startswith(f"parity {argv[0]}: error: unrecognized arguments: ")
    assert err.rstrip().endswith(f"did you mean {meant}?")


def test_a_misspelled_command_gets_the_command_meant(capsys):
    with pytest.raises(SystemExit) as info:
        main(["valdate", "--model", "demo:cnn"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert err.startswith("parity: error: no command 'valdate': did you mean validate?")


def test_an_unknown_command_lists_the_commands_without_a_guess(capsys):
    with pytest.raises(SystemExit):
        main(["frobnicate"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "(commands: validate, report, demos, dashboard" in err


def test_a_bad_value_is_one_line_too(capsys):
    with pytest.raises(SystemExit) as info:
        main(["validate", "--model", "demo:cnn", "--input-sets", "two"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "parity validate: error: argument --input-sets: invalid int value: 'two'\n"
    )


@pytest.mark.parametrize(
    ("ref", "onnx", "expected"),
    [
        (0.066812, 0.066847, ("0.06681", "0.06685")),
        (0.5, 0.481, ("0.5", "0.481")),  # apart already: the short form
        (1.23456e-5, 1.23459e-5, ("1.23456e-05", "1.23459e-05")),
        (0.25, 0.25, ("0.25", "0.25")),  # one value: no digits added
        (float("nan"), 0.1, ("nan", "0.1")),
        (None, 1.0, ("-", "1")),
    ],
)
def test_a_pair_of_numbers_gets_the_digits_that_tell_them_apart(ref, onnx, expected):
    from parity.text import number_pair_text

    assert number_pair_text(ref, onnx) == expected


def test_float32_neighbours_read_differently():
    import numpy as np

    from parity.text import number_pair_text

    a = np.float32(0.0668)
    b = np.nextafter(a, np.float32(1))
    ref, onnx = number_pair_text(float(a), float(b))
    assert float(ref) < float(onnx)  # apart, in the right order


def _shifted_export(tmp_path):
    """y = x + b exported with b = 0, then b moved by 3.5e-5: at x = 0.0668 torch reads
    0.066835, ONNX 0.0668, alike to number_text's three digits."""
    import torch

    class AddBias(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b = torch.nn.Parameter(torch.zeros(4))

        def forward(self, x):
            return x + self.b

    model = AddBias().eval()
    x = torch.full((2, 4), 0.0668)
    path = tmp_path / "add.onnx"
    torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False)
    with torch.no_grad():
        model.b.add_(3.5e-5)
    return model, path, x


def _worst_values(text: str) -> tuple[str, str]:
    import re

    found = re.search(r"Worst element at index \[[^\]]*\]: ref (\S+), onnx (\S+)", text)
    assert found, text
    return found.group(1).rstrip(","), found.group(2)


def test_assert_export_close_prints_worst_values_that_differ(tmp_path):
    import parity

    model, path, x = _shifted_export(tmp_path)
    with pytest.raises(AssertionError) as caught:
        parity.assert_export_close(model, str(path), inputs={"x": x.numpy()})
    ref, onnx = _worst_values(str(caught.value))
    assert ref != onnx, str(caught.value)
    assert abs(float(ref) - 0.066835) < 1e-5 and abs(float(onnx) - 0.0668) < 1e-5


def test_the_terminal_prints_worst_values_that_differ(tmp_path, capsys):
    import numpy as np

    model, path, x = _shifted_export(tmp_path)
    factory = tmp_path / "shifted.py"
    factory.write_text(
        "import torch\n"
        "class AddBias(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.b = torch.nn.Parameter(torch.full((4,), 3.5e-5))\n"
        "    def forward(self, x):\n"
        "        return x + self.b\n"
        "def make():\n"
        "    return AddBias().eval()\n"
    )
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=x.numpy())
    argv = ["validate", "--model", f"{factory}:make", "--onnx", str(path), "--inputs", str(feeds)]
    assert main(argv) == 1
    ref, onnx = _worst_values(capsys.readouterr().out)
    assert ref != onnx and abs(float(ref) - 0.066835) < 1e-5


def _stateful_pair(tmp_path):
    """A TorchScript whose forward(x, sr) computes what an ONNX file with the inputs
    (input, state, sr) computes (the state unused), as silero-vad ships its two files."""
    import torch

    class Scripted(torch.nn.Module):
        def forward(self, x, sr):
            return x * 2 + sr

    class Exported(torch.nn.Module):
        def forward(self, input, state, sr):
            return input * 2 + sr + 0 * state.sum()

    script = tmp_path / "vad.jit"
    torch.jit.script(Scripted()).save(str(script))
    onnx_path = tmp_path / "vad.onnx"
    feeds = (torch.randn(1, 8), torch.zeros(2, 1, 4), torch.ones(1))
    torch.onnx.export(
        Exported(), feeds, str(onnx_path), input_names=["input", "state", "sr"],
        output_names=["output"], dynamo=False,
    )  # fmt: skip
    return script, onnx_path


def test_a_signature_mismatch_shows_both_signatures_and_the_wrapper(tmp_path, capsys):
    script, onnx_path = _stateful_pair(tmp_path)
    assert main(["validate", "--model", str(script), "--onnx", str(onnx_path)]) == 2
    err = capsys.readouterr().err
    first, *wrapper = err.splitlines()
    assert first.startswith("parity: error: the model's forward(x, sr) does not take the ONNX ")
    assert "inputs (input, state, sr)" in first and "--model wrap.py:make" in first
    code = "\n".join(line.removeprefix("    ") for line in wrapper)
    assert "def forward(self, input, state, sr):" in code
    assert "return self.inner(input, sr)" in code and f"torch.jit.load({str(script)!r})" in code

    # the wrapper as printed is the fix: with it, the pair validates and passes
    (tmp_path / "wrap.py").write_text(code + "\n")
    spec = f"{tmp_path / 'wrap.py'}:make"
    assert main(["validate", "--model", spec, "--onnx", str(onnx_path)]) == 0, capsys.readouterr()


def test_the_api_raises_the_mismatch_with_the_wrapper_as_detail(tmp_path):
    import torch

    import parity
    from parity.errors import ModelRunError

    script, onnx_path = _stateful_pair(tmp_path)
    with pytest.raises(ModelRunError) as caught:
        parity.validate(torch.jit.load(str(script)), str(onnx_path))
    assert "forward(x, sr)" in str(caught.value) and "(input, state, sr)" in str(caught.value)
    assert "def forward(self, input, state, sr):" in caught.value.detail


@pytest.fixture
def unnamed_pair(tmp_path):
    """An ONNX file whose inputs' dynamic dims have no names (input [1, ?], state [2, ?, 4],
    as silero-vad's), and the torch factory computing the same."""
    import onnx
    from onnx import TensorProto, helper

    inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, None]),
        helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, 4]),
    ]
    output = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, None])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    node = helper.make_node("Mul", ["input", "two"], ["output"])
    graph = helper.make_graph([node], "g", inputs, [output], [two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx_path = tmp_path / "unnamed.onnx"
    onnx.save(model, str(onnx_path))
    factory = tmp_path / "double.py"
    factory.write_text(
        "import torch\n"
        "class Double(torch.nn.Module):\n"
        "    def forward(self, input, state):\n"
        "        return input * 2\n"
        "def make():\n"
        "    return Double()\n"
    )
    return ["validate", "--model", f"{factory}:make", "--onnx", str(onnx_path)]


def test_dim_input_axis_sizes_an_unnamed_dynamic_dim(unnamed_pair, capsys):
    argv = [*unnamed_pair, "--dim", "input:1=100", "--dim", "state:1=3", "--input-sets", "2"]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "input set 0: input(1, 100), state(2, 3, 4)" in out
    assert "input set 1: input(1, 104), state(2, 4, 4)" in out  # grown like a named dim


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("len=100", "no symbolic dim 'len'; symbolic dims: (none); unnamed dynamic dims "
         "(INPUT:AXIS): input:1, state:1"),
        ("state:2=100", "--dim state:2: that axis is fixed at 4 in the ONNX file"),
        ("state:7=100", "--dim state:7: input 'state' has axes 0 to 2 (shape [2, ?, 4])"),
        ("input:1=0", "--dim input:1=0: a size must be an integer >= 1"),
    ],
)  # fmt: skip
def test_a_bad_input_axis_dim_is_one_line_naming_what_to_give(unnamed_pair, capsys, flag, expected):
    assert main([*unnamed_pair, "--dim", flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err


def test_input_axis_of_a_symbolic_dim_points_at_its_name(tiny_artifacts, model_zoo, capsys):
    import onnx

    from parity.load.onnx_model import read_signature

    signature = read_signature(onnx.load(str(tiny_artifacts.onnx)))
    spec = next(s for s in signature.inputs if s.symbolic_dims)
    axis = next(k for k, d in enumerate(spec.shape) if isinstance(d, str))
    argv = ["validate", "--model", model_zoo.spec("make_tiny"), "--onnx", str(tiny_artifacts.onnx)]
    assert main([*argv, "--dim", f"{spec.name}:{axis}=5"]) == 2
    err = capsys.readouterr().err
    assert f"that axis is the symbolic dim {spec.shape[axis]!r}; give --dim" in err


@functools.cache
def _undecomposable_op():
    """A custom op whose registered decomposition raises: torch's run_decompositions (the
    ONNX exporter's pre-conversion step) fails on any program holding it, as it did on a
    real .pt2 (facenet-pytorch's MTCNN) in issue 37."""
    import torch

    @torch.library.custom_op("parity_test::wobble", mutates_args=(), schema="(Tensor x) -> Tensor")
    def wobble(x):
        return x.sin()

    @wobble.register_fake
    def _(x):
        return torch.empty_like(x)

    @torch._decomp.register_decomposition(torch.ops.parity_test.wobble.default)
    def _(x):
        raise RuntimeError("cannot decompose wobble here")

    return torch.ops.parity_test.wobble


def test_layers_on_a_pt2_torch_cannot_decompose_say_torch_failed_and_the_factory_route(
    tmp_path, capsys
):
    import torch

    wobble = _undecomposable_op()

    class Wobbly(torch.nn.Module):
        def forward(self, x):
            return wobble(x) * 2

    class Plain(torch.nn.Module):
        def forward(self, x):
            return x.sin() * 2

    x = torch.randn(2, 3)
    pt2, onnx_path = tmp_path / "wobbly.pt2", tmp_path / "wobbly.onnx"
    torch.export.save(torch.export.export(Wobbly(), (x,)), str(pt2))
    torch.onnx.export(Plain(), (x,), str(onnx_path), dynamo=True, input_names=["x"])
    report = tmp_path / "r.json"
    argv = ["validate", "--model", str(pt2), "--onnx", str(onnx_path), "--layers"]
    assert main([*argv, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    (note,) = [n for n in json.loads(report.read_text())["layers"]["notes"] if "decompos" in n]
    assert note.startswith("torch itself failed to run the ONNX exporter's decompositions on ")
    assert "cannot decompose wobble here" in note and "torch's failure" in note
    assert "--model FILE.py:CALLABLE" in note and "on this torch" not in note
    assert note in out  # the terminal says the same
