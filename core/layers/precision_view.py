"""What a lower-precision candidate should keep in higher precision, in words and as the
Python that does it: the same lines for the terminal, the Layers page and the HTML report
(from the layers result's findings, parity.layers.qdq and parity.layers.fp16)."""

from __future__ import annotations

from parity.layers.result import LayersResult


def _db(x: object) -> str:
    return "n/a" if x is None else f"{float(x):.1f} dB"  # type: ignore[arg-type]


def precision_lines(result: LayersResult) -> list[str]:
    f = result.findings
    lines: list[str] = []
    exclude = f.get("exclude_from_quantization")
    if exclude:
        check = f.get("exclusion_check") or {}
        tried = check.get("tried")
        lines.append(
            f"keep in float (quantize_static nodes_to_exclude): {', '.join(exclude)}; "
            f"simulated without re-calibrating: outputs' SQNR {_db(check.get('sqnr_db_before'))}"
            f" -> {_db(check.get('sqnr_db_after'))}"
            + (f", the best of {tried} exclusions tried" if tried else "")
        )
    check = f.get("keep_float32_check")
    if check:
        block = ", ".join(check.get("node_block_list") or ()) or "(none)"
        if check.get("fixed"):
            lines.append(
                f"keep in float32 (node_block_list): {block}; converted again and compared "
                f"again: {check.get('nonfinite_values_before')} -> "
                f"{check.get('nonfinite_values_after')} values with one-sided Inf/NaN, "
                "nothing born diverging (write it with --write-fixed FILE.onnx)"
            )
        else:
            dtype = check.get("dtype") or "float16"
            lines.append(f"keeping {block} in float32 did not fix the {dtype} file")
    return lines


def quantize_call(result: LayersResult) -> str | None:
    exclude = result.findings.get("exclude_from_quantization")
    if not exclude:
        return None
    return (
        "from onnxruntime.quantization import QuantFormat, quantize_static\n\n"
        "quantize_static(MODEL_FP32, MODEL_QDQ, calibration_reader, "
        f"quant_format=QuantFormat.QDQ, nodes_to_exclude={list(exclude)!r})\n"
    )


def fix_call(result: LayersResult) -> str | None:
    check = result.findings.get("keep_float32_check")
    return str(check["python"]) if check and check.get("fixed") else None
