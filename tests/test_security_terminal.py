"""Text from a file is text on a terminal too (issue 54, cause 4): names in an ONNX file (an
output, an input, a symbolic dim, a node), a stack trace's file name in the frozen sentence,
the static-axis sentence and every text of a saved run reach stdout and stderr with their
control characters escaped (parity.text.terminal_text), never as the bytes that would clear
the screen and leave a forged ``PASS`` line on it. Each case runs the CLI in this process.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity.cli import main
from parity.text import FIELD_LIMIT, terminal_text
from tests.helpers.forged_runs import rewrite

FAKE_PASS = "PASS: every output within tolerance"
OUTPUT = f"y\x1b[2J\x1b[H\x1b[32m{FAKE_PASS}\x1b[0m\x1b[8m"  # clears the screen, hides the rest
INPUT = "x\u202e\x9b31m\nPASS"  # a bidi override, a C1 CSI, a newline
DIM = "n\x1b]0;title\x07"  # an OSC that sets the window's title
TRACED = "/home/u/evil\x1b[2J\x9b\u202e.py"  # the file a dynamo stack trace names
FORGED = "\x1b[2J\x1b[H\u202e\x9b1m\r\n" + FAKE_PASS  # put into every text of a saved run

RAW = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
"""What may never reach the terminal: every control character but newline and tab, every
bidirectional mark, embedding, override and isolate."""

MODELS = textwrap.dedent(
    """
    import torch


    class Add(torch.nn.Module):
        def forward(self, x):
            return x + 1.0


    class Mean(torch.nn.Module):
        def forward(self, x):
            return x.mean(1)


    def add():
        return Add()


    def mean():
        return Mean()
    """
)


def _onnx(path: Path, *, static: bool = False, divisor: float | None = None, delta=0.5) -> Path:
    """y = x + 1 + delta (torch: x + 1), or sum(x, 1) / divisor (torch: the mean): an export
    frozen at n = divisor, its Div traced to TRACED. Every name carries escapes."""
    shape = [16, DIM] if static else [1, DIM]
    x = helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, shape)
    if divisor is None:
        inits = [numpy_helper.from_array(np.array(1.0 + delta, np.float32), "c")]
        nodes = [helper.make_node("Add", [INPUT, "c"], [OUTPUT], name="add\x1b[31m")]
        y = helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, shape)
    else:
        inits = [
            numpy_helper.from_array(np.array([1], np.int64), "axes"),
            numpy_helper.from_array(np.array(divisor, np.float32), "d"),
        ]
        div = helper.make_node("Div", ["s", "d"], [OUTPUT], name="div\x1b[2J")
        trace = f'File "{TRACED}", line 7, in forward\n    return x.sum(1) / 24'
        div.metadata_props.add(key="pkg.torch.onnx.stack_trace", value=trace)
        nodes = [helper.make_node("ReduceSum", [INPUT, "axes"], ["s"], keepdims=0), div]
        y = helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [1])
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("escapes")
    (root / "models.py").write_text(MODELS)
    _onnx(root / "add.onnx")
    _onnx(root / "static.onnx", static=True, delta=0.0)
    _onnx(root / "frozen.onnx", divisor=24.0)
    return root


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _validate(capsys, root: Path, onnx_name: str, model: str, *flags: str):
    argv = ["validate", "--model", f"{root / 'models.py'}:{model}"]
    return _cli(capsys, [*argv, "--onnx", str(root / onnx_name), *flags])


def assert_clean(*texts: str, passed: bool = False) -> None:
    """No raw control character anywhere, and no line but Parity's own verdict (the last of
    a run that passed) says PASS."""
    for text in texts:
        found = RAW.search(text)
        assert found is None, f"raw {found.group()!r} reached the terminal: {text[:2000]!r}"
        lines = text.rstrip().splitlines()[: -1 if passed else None]
        assert not any(line.startswith("PASS") for line in lines), text[:2000]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("\x9b31m", "\\x9b31m"),
        ("\x00\x07\x08\x7f", "\\x00\\x07\\x08\\x7f"),
        ("\r\n\t", "\\x0d\\x0a\\x09"),
        ("\u202eabc\u2066\u2069\u200f\u061c", "\\u202eabc\\u2066\\u2069\\u200f\\u061c"),
        ("caf\u00e9 \u65e5\u672c \\x1b", "caf\u00e9 \u65e5\u672c \\x1b"),  # text stays text
    ],
)
def test_one_function_escapes_every_control_and_bidi_character(raw: str, shown: str) -> None:
    assert terminal_text(raw) == shown
    assert terminal_text(terminal_text(raw)) == shown  # escaping twice changes nothing
    assert terminal_text(f"a\n{raw}\tb", lines=True) == f"a\n{shown}\tb".replace(
        "\\x0a", "\n"
    ).replace("\\x09", "\t")  # a whole text keeps its lines and tabs


def test_a_field_is_cut_and_says_so() -> None:
    shown = terminal_text("a" * (FIELD_LIMIT + 1234))
    assert shown.startswith("a" * FIELD_LIMIT) and "1,234 more characters cut" in shown


def test_onnx_output_input_and_dim_names_reach_the_terminal_escaped(files, capsys) -> None:
    """The run fails (exit 1): the terminal ends on its FAIL line, not on a forged PASS."""
    code, out, err = _validate(capsys, files, "add.onnx", "add")
    assert code == 1
    assert_clean(out, err)
    assert out.rstrip().splitlines()[-1].startswith("FAIL: 2 of 2 comparisons")
    assert terminal_text(OUTPUT) in out.splitlines()[-1]
    assert "x\\u202e\\x9b31m\\x0aPASS(1, 8)" in out  # the input set line
    assert "n\\x1b]0;title\\x07=8" in out


def test_the_static_axis_sentence_names_the_input_escaped(files, capsys) -> None:
    code, out, err = _validate(capsys, files, "static.onnx", "add")
    assert code == 0
    assert_clean(out, err, passed=True)
    [said] = [line for line in out.splitlines() if "is fixed at 16 on axis 0" in line]
    assert "x\\u202e\\x9b31m" in said


def test_the_frozen_sentence_names_the_traced_file_and_the_dims_escaped(files, capsys) -> None:
    code, out, err = _validate(capsys, files, "frozen.onnx", "mean")
    assert code == 1
    assert_clean(out, err)
    [said] = [line for line in out.splitlines() if "only works at its own size" in line]
    assert "(evil\\x1b[2J\\x9b\\u202e.py:7)" in said and "n\\x1b]0;title\\x07 24" in said
    assert "node 'div\\x1b[2J'" in said


def test_an_error_line_names_the_file_escaped(files, capsys) -> None:
    """ONNX Runtime's and Parity's messages quote names: the one error line is text too."""
    missing = files / f"no\x1b[2J{FAKE_PASS}.onnx"
    code, out, err = _validate(capsys, files, missing.name, "add")
    assert code == 2
    assert_clean(out, err)
    assert err.startswith("parity: error:") and "no\\x1b[2J" in err


def _every_text(value: object, key: str = "") -> object:
    """The manifest with FORGED appended to every text a person reads (names kept apart, as
    their arrays and rows pair by them)."""
    texts = {"text", "message", "label", "model", "onnx", "source", "error", "provider"}
    if isinstance(value, dict):
        return {k: _every_text(v, k) for k, v in value.items()}
    if isinstance(value, list):
        forged = [_every_text(v, key) for v in value]
        return [*forged, FORGED] if key == "notes" else forged
    if isinstance(value, str) and key in texts:
        return value + FORGED
    return value


@pytest.fixture(scope="module")
def saved(files, tmp_path_factory) -> Path:
    """The frozen run (its names, its frozen sentence, a static-axis sentence added) saved."""
    path = tmp_path_factory.mktemp("saved") / "frozen.parity.npz"
    model = f"{files / 'models.py'}:mean"
    onnx_path = str(files / "frozen.onnx")
    main(["validate", "--model", model, "--onnx", onnx_path, "--save-run", str(path)])
    return path


def _with_static_axis(manifest: dict) -> None:
    manifest["static_axes"] = [
        {"input": INPUT, "axis": 0, "size": 16, "torch_size": 32, "text": f"fixed{FORGED}"}
    ]


def test_every_text_of_a_saved_run_reaches_the_terminal_escaped(saved, tmp_path, capsys) -> None:
    def forge(manifest: dict) -> None:
        manifest.update(_every_text(manifest))
        _with_static_axis(manifest)

    forged = rewrite(saved, tmp_path / "forged.parity.npz", forge)
    code, out, err = _cli(capsys, ["report", str(forged)])
    assert code == 1, err
    assert_clean(out, err)
    escaped = terminal_text(FORGED)
    assert out.count(escaped) >= 7  # model, onnx, a note, two labels, two sentences
    assert f"(evil\\x1b[2J\\x9b\\u202e.py:7).{escaped}" in out  # the frozen sentence
    assert f"  - fixed{escaped}" in out  # the static-axis sentence
    # a message is several lines by nature: a forged one may add a line to its own block,
    # indented under it, never one of Parity's own at the start of a line
    assert "0.666667\\x1b[2J\\x1b[H\\u202e\\x9b1m\n" in out


def test_a_huge_saved_text_is_cut_on_the_terminal(saved, tmp_path, capsys) -> None:
    """A frozen sentence of 10 MB: the terminal shows its first FIELD_LIMIT characters and
    how many more there were."""

    def forge(manifest: dict) -> None:
        manifest["frozen"][0]["text"] = "frozen " + "x" * 10_000_000

    forged = rewrite(saved, tmp_path / "huge.parity.npz", forge)
    code, out, err = _cli(capsys, ["report", str(forged)])
    assert code == 1, err
    assert len(out) < 50_000
    assert f"{10_000_007 - FIELD_LIMIT:,} more characters cut" in out


def test_a_sweep_pairs_line_names_it_and_its_outputs_escaped() -> None:
    """A pair's name is the manifest's, its failing outputs and error its run's."""
    from parity.sweep.cli import _line
    from parity.sweep.execute import PairResult
    from parity.verdict import Verdict

    def pair(verdict: Verdict, error: str | None) -> PairResult:
        return PairResult(f"p{FORGED}", verdict, 1, 0.1, error, (OUTPUT,), None, "k")

    failed, broken = _line(pair(Verdict.FAIL, None)), _line(pair(Verdict.ERROR, f"e{FORGED}"))
    assert_clean(failed, broken)
    assert terminal_text(OUTPUT) in failed and f"e{terminal_text(FORGED)}" in broken
