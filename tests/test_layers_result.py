"""The layers result contract: strict JSON, round trip through JSON and through a saved run."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np

from parity.layers.result import KeptValue, LayersResult, LayerStatus, LayerValue
from parity.reports.report import dumps, report_dict
from parity.reports.saved_run import load_run, save_run
from tests.test_saved_run import make_run


def _value(order: int, status: str, ratio: float, input_set: int = 0) -> LayerValue:
    return LayerValue(
        order=order,
        onnx_value=f"v{order}",
        onnx_node=f"node_v{order}",
        onnx_op="Add",
        torch_module="encoder.layer.0.output" if order else None,
        torch_node=f"add_{order}",
        input_set=input_set,
        shape=(2, 3),
        max_abs=ratio,
        max_rel=math.inf,
        scale=1.0,
        error_ratio=ratio,
        jump=math.nan,
        cosine=1.0,
        status=status,
        inputs=(order - 1,) if order else (),
    )


def _result() -> LayersResult:
    first = _value(1, LayerStatus.DIVERGES, 0.5)
    ref = np.arange(6, dtype=np.float32).reshape(2, 3)
    return LayersResult(
        criterion="test",
        matching="fx names",
        matched=3,
        unmatched_onnx=1,
        unmatched_torch=0,
        first_divergence=first,
        values=(_value(0, LayerStatus.PASS, 1e-8), first, _value(2, LayerStatus.CARRIED, 0.4)),
        notes=("one note",),
        threshold=1e-4,
        min_jump=100.0,
        kept=(KeptValue(1, 0, "v1", ref, ref + 0.5),),
    )


def test_json_is_strict_and_round_trips() -> None:
    result = _result()
    text = json.dumps(result.to_json(), allow_nan=False)  # raises on NaN/Infinity
    data = json.loads(text)
    assert data["first_divergence"]["onnx_value"] == "v1"
    assert data["values"][1]["max_rel"] is None  # inf -> null
    back = LayersResult.from_json(data)
    assert back.values[1].status == "diverges" and back.values[0].jump is None
    assert back.first_divergence == replace(result.first_divergence, max_rel=None, jump=None)
    assert [v.order for v in result.after_first()] == [2]


def test_report_and_saved_run_keep_layers(tmp_path) -> None:
    run = make_run({"y": np.ones((2, 3), np.float32)}).with_layers({0: _result()})
    report = report_dict(run)
    assert report["layers"]["matched"] == 3
    dumps(report)
    assert "layers" not in report_dict(run.with_layers({0: None}))
    back = load_run(save_run(run, tmp_path / "r.parity.npz"))
    assert back.layers is not None
    assert back.layers.first_divergence.onnx_value == "v1"
    kept = back.layers.kept_value(1, 0)
    assert kept is not None
    np.testing.assert_array_equal(kept.onnx - kept.ref, np.full((2, 3), 0.5, np.float32))


def test_a_first_divergence_the_criterion_calls_carried_is_not_said_to_diverge() -> None:
    """A quantized file names the tensor whose Q/DQ pair loses the most as its first
    divergence, though the criterion alone may judge it carried: the terminal says it was
    named, and why the criterion differs, never 'diverges first ... status carried'."""
    from parity.layers.text import format_layers

    value = LayerValue(
        order=3, onnx_value="c1", onnx_node="conv1", onnx_op="Conv", torch_module=None,
        torch_node=None, input_set=0, shape=(1, 8), max_abs=0.5, max_rel=0.1, scale=1.0,
        error_ratio=0.2, jump=2.0, cosine=0.99, status="carried", inputs=(1,),
    )  # fmt: skip
    result = LayersResult(
        criterion="", matching="onnx names", matched=1, unmatched_onnx=0, unmatched_torch=0,
        first_divergence=value, values=(value,), notes=(),
    )  # fmt: skip
    text = format_layers(result)
    assert "diverges first" not in text and "status carried" not in text
    assert "named as the first divergence: Conv node 'conv1' -> 'c1', input set 0" in text
    assert "judges it carried: its error is no bigger than the error flowing into it" in text
    born = format_layers(
        LayersResult(
            criterion="", matching="onnx names", matched=1, unmatched_onnx=0, unmatched_torch=0,
            first_divergence=replace(value, status="diverges"),
            values=(value,), notes=(),
        )
    )  # fmt: skip
    assert "diverges first at Conv node 'conv1'" in born and "status diverges" in born
