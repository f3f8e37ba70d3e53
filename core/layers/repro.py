"""A repro folder for the confirmed first divergence, runnable with numpy, onnx and
onnxruntime only (``--repro DIR``, ``validate(..., repro=DIR)``, the Layers page's .zip).

    DIR/model.onnx                    the cut (parity.layers.confirm): the node alone, or the
                                      few unmatched nodes feeding it, own weights inline
    DIR/test_data_set_0/input_K.pb    TensorProto: torch's values of its inputs
    DIR/test_data_set_0/output_0.pb   TensorProto: torch's value of its output (expected)
    DIR/repro.py                      runs ONNX Runtime on them; exit 1 while they disagree
    DIR/README.md                     what diverged, the command, the versions

ONNX's backend-test layout (onnx_test_runner reads it too). Files are built in memory
(`repro_files`) and written atomically one by one (`write_repro`); a run without a confirmed
first divergence writes nothing and says so in one line.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import numpy_helper

from parity.errors import WriteError
from parity.layers import criterion
from parity.layers.result import LayersResult
from parity.layers.views import fmt
from parity.load.onnx_model import check_as_ort_runs
from parity.load.onnx_read import read_onnx
from parity.version import __version__

MODEL = "model.onnx"
DATA = "test_data_set_0"


@dataclass(frozen=True)
class ReproWritten:
    folder: Path | None  # None: nothing written
    message: str  # one line for the terminal


def no_repro_reason(result: LayersResult | None) -> str | None:
    """Why this run has no repro (None when it has one)."""
    if result is None:
        return "no repro written: this run compared no layers"
    if result.repro is not None:
        return None
    if result.first_divergence is None:
        return "no repro written: no op was confirmed where an error is born (clean run)"
    confirmation = result.confirmation_of(result.first_divergence)
    if confirmation is not None and confirmation.outcome == "born":
        return (
            "no repro written: the birth is confirmed, but its inputs were not kept with this "
            "run (a reopened run keeps none); make the run again with --repro DIR"
        )
    return (
        "no repro written: the first divergence could not be re-run alone "
        "(unconfirmed, see the layers notes)"
    )


def repro_files(result: LayersResult, *, command: str, onnx_path: str | Path) -> dict[str, bytes]:
    """Relative path -> content of the repro folder (`result` must have a repro case)."""
    case = result.repro
    if case is None:
        raise ValueError(no_repro_reason(result))
    model = case.cut.model
    check_as_ort_runs(model, full_check=True)  # ONNX Runtime's own default-domain ops too
    files = {MODEL: model.SerializeToString()}
    for k, name in enumerate(case.cut.inputs):
        tensor = numpy_helper.from_array(case.inputs[name], name)
        files[f"{DATA}/input_{k}.pb"] = tensor.SerializeToString()
    out = numpy_helper.from_array(case.expected, case.cut.output)
    files[f"{DATA}/output_0.pb"] = out.SerializeToString()
    files["repro.py"] = _script(case.provider).encode()
    files["README.md"] = _readme(result, command=command, onnx_path=onnx_path).encode()
    return files


def write_repro(
    result: LayersResult | None, folder: str | Path, *, command: str, onnx_path: str | Path
) -> ReproWritten:
    """Write the repro folder (atomically, file by file); a clean run writes nothing."""
    from parity.files.atomic import write_output
    from parity.files.outputs import check_repro_folder, clear_stale_repro

    reason = no_repro_reason(result)
    if reason is not None:
        return ReproWritten(None, reason)
    assert result is not None
    files = repro_files(result, command=command, onnx_path=onnx_path)
    root = Path(folder)
    check_repro_folder(root, "repro folder")  # again: no link to elsewhere since the check
    try:
        (root / DATA).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"cannot write repro folder {root}: {exc.strerror or exc}") from exc
    clear_stale_repro(root, keep=files)  # an earlier repro's extra input_K.pb: repro.py reads all
    for rel, data in files.items():
        write_output(root / rel, data, what="repro file")
    c = result.repro
    return ReproWritten(
        root,
        f"repro written to {root}: {c.value.onnx_op} node {c.value.onnx_node!r} alone "
        f"({len(c.cut.nodes)} node(s)); run: python {root / 'repro.py'}",
    )


def repro_zip(result: LayersResult, *, command: str, onnx_path: str | Path) -> bytes:
    """The same folder as a .zip (for a download), under a top folder ``repro/``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data in repro_files(result, command=command, onnx_path=onnx_path).items():
            z.writestr(f"repro/{rel}", data)
    return buffer.getvalue()


def versions() -> Mapping[str, str]:
    import onnxruntime
    import torch

    return {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "parity": __version__,
    }


def _readme(result: LayersResult, *, command: str, onnx_path: str | Path) -> str:
    case = result.repro
    v = case.value
    c = result.confirmation_of(v)
    source = read_onnx(onnx_path, external_data=False)
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in case.cut.model.opset_import)
    exporter = f"{source.producer_name or '?'} {source.producer_version or ''}".strip()
    dynamo = any(
        p.key == "pkg.torch.onnx.fx_node" for n in source.graph.node[:50] for p in n.metadata_props
    )
    exporter += " (torch.onnx dynamo exporter)" if dynamo else " (not the dynamo exporter)"
    lines = [
        f"# {v.onnx_op} node `{v.onnx_node}` disagrees with torch from exact inputs",
        "",
        "Found by Parity's layer localisation and confirmed by re-running the node alone.",
        "",
        f"- torch module: `{v.torch_module or '(top level)'}`"
        + (f" (FX node `{v.torch_node}`)" if v.torch_node else ""),
        f"- ONNX op: `{v.onnx_op}`, node `{v.onnx_node}`, value `{v.onnx_value}`",
        f"- nodes in model.onnx: {len(case.cut.nodes)} ({', '.join(case.cut.ops)})",
        f"- in the full run (input set {v.input_set}): max |error| {fmt(v.max_abs)}, "
        f"error ratio {fmt(v.error_ratio)}",
        f"- alone, on torch's values of its inputs: max |error| "
        f"{fmt(c.max_abs if c else None)}, error ratio {fmt(c.error_ratio if c else None)}",
        f"- error ratio = max |got - expected| / (scale + |expected|), scale = median "
        f"non-zero |expected|; repro.py fails above {criterion.THRESHOLD:g}",
        "",
        "## Run it",
        "",
        "    pip install numpy onnx onnxruntime",
        "    python repro.py        # exit 1 while the node disagrees, 0 once fixed",
        "",
        f"`{DATA}/input_K.pb` hold torch's values of the node's inputs and `output_0.pb` "
        "torch's value of its output (ONNX TensorProto, the layout of ONNX's backend tests).",
        "",
        "## How it was found",
        "",
        f"    {command}",
        "",
        f"- exported by: {exporter}; opsets: {opsets}",
        f"- ONNX Runtime provider: {case.provider}, optimisation level {case.opt_level}",
        *(f"- {name} {version}" for name, version in versions().items()),
        "",
    ]
    return "\n".join(lines)


def _script(provider: str) -> str:
    return _SCRIPT.replace("@THRESHOLD@", repr(criterion.THRESHOLD)).replace(
        "@PROVIDER@", repr(provider)
    )


_SCRIPT = '''"""Run model.onnx on test_data_set_0 and compare with the expected (torch's) output.
Needs numpy, onnx and onnxruntime only. Exit 1 while the node disagrees, 0 once it agrees."""

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper

THRESHOLD = @THRESHOLD@  # on error ratio = max |got - expected| / (scale + |expected|)
HERE = Path(__file__).resolve().parent


def load(path):
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return tensor.name, numpy_helper.to_array(tensor)


def main():
    model = onnx.load(str(HERE / "model.onnx"))
    data = HERE / "test_data_set_0"
    inputs = [load(p) for p in sorted(data.glob("input_*.pb"), key=lambda p: int(p.stem[6:]))]
    names = [i.name for i in model.graph.input]
    feeds = {name: array for name, (_, array) in zip(names, inputs)}
    _, expected = load(data / "output_0.pb")
    providers = list(dict.fromkeys([@PROVIDER@, "CPUExecutionProvider"]))
    available = onnxruntime.get_available_providers()
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=[p for p in providers if p in available]
    )
    (got,) = session.run(None, feeds)
    got = np.asarray(got)
    op = ", ".join(sorted({n.op_type for n in model.graph.node}))
    print(f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}: {op}")
    if got.shape != expected.shape:
        print(f"DISAGREES: shape {got.shape}, expected {expected.shape}")
        return 1
    e = expected.astype(np.float64)
    g = got.astype(np.float64)
    one_sided = np.isfinite(e) != np.isfinite(g)
    finite = np.isfinite(e) & np.isfinite(g)
    diff = np.where(finite, np.abs(g - e), 0.0)
    nonzero = np.abs(e[finite & (e != 0)])
    scale = float(np.median(nonzero)) if nonzero.size else 0.0
    ratio = diff / (scale + np.abs(e) + np.finfo(np.float32).tiny)
    k = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    worst = float(ratio.max()) if ratio.size else 0.0
    print(f"expected: shape {expected.shape}, max |expected| {np.abs(e[finite]).max():.6g}")
    print(f"got:      max |got - expected| {diff.max():.6g}, error ratio {worst:.3g}")
    if ratio.size:
        print(f"worst element {tuple(int(i) for i in k)}: expected {e[k]:.9g}, got {g[k]:.9g}")
    if one_sided.any():
        print(f"DISAGREES: {int(one_sided.sum())} elements NaN/Inf on one side only")
        return 1
    if worst > THRESHOLD:
        print(f"DISAGREES: error ratio {worst:.3g} > {THRESHOLD:g}")
        return 1
    print("agrees")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
