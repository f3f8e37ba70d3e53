"""The deploy matrix, float16 (issue 63): files made by both float16 converters, ONNX
Runtime's `onnxruntime.transformers.float16.convert_float_to_float16` and onnxconverter-common's
`float16.convert_float_to_float16`, keep_io_types True and False, from a small CNN (legacy and
dynamo export) and a tiny random BERT (Optimum's export, run as hf:). Each clean file passes
by cause with no bug said, --layers and --noise-floor included (its difference is float16
rounding); one bias moved by +0.05 at one node is a bug that fails by cause, named at that
node with --layers. A small bug (the CNN's fc weight scaled to a few times torch's own float16
error, under the 10x a ratio alone calls rounding) is a bug by cause too: the float32 twin
tells it (parity.judge.noise_floor)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

from parity.pipeline import RunConfig, run_validation
from parity.results import FindingKind, ValidationRun
from parity.run.hf_options import HfOptions
from parity.verdict import Judge
from tests.helpers.deploy_matrix import record, right
from tests.helpers.hf_models import PROMPTS
from tests.helpers.plant_bug import plant, scale_for_error

CNN_SOURCE = """
import torch
from torch import nn


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(x.mean(dim=(2, 3)))


def make():
    torch.manual_seed(0)
    return CNN().eval()
"""

# (tool, keep_io_types): the converters as users call them
CONVERTERS = [(t, k) for t in ("ORT float16", "onnxconverter-common") for k in (True, False)]
ARCHS = ("cnn (legacy)", "cnn (dynamo)", "BERT (hf:)")
BUMP = 0.05  # one bias element moved: far above float16's rounding, small beside the weights


def _convert(src: Path, dst: Path, tool: str, keep_io: bool) -> Path:
    model = onnx.load(str(src))
    if tool == "ORT float16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        half = convert_float_to_float16(model, keep_io_types=keep_io)
    else:
        from onnxconverter_common import float16

        half = float16.convert_float_to_float16(model, keep_io_types=keep_io)
    onnx.save(half, str(dst))
    return dst


def _export_cnn(path: Path, exporter: str) -> Path:
    namespace: dict = {}
    exec(compile(CNN_SOURCE, "cnn.py", "exec"), namespace)
    model, x = namespace["make"](), (torch.randn(2, 3, 16, 16),)
    if exporter == "legacy":
        torch.onnx.export(model, x, str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b"}}, dynamo=False)  # fmt: skip
    else:
        program = torch.onnx.export(model, x, dynamo=True, input_names=["x"],
                                    output_names=["y"])  # fmt: skip
        program.save(str(path))
    return path


def _bert(root: Path) -> tuple[str, Path]:
    import transformers

    from tests.helpers.hf_tasks import optimum_export, save_text_model

    config = transformers.BertConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    bert = transformers.BertModel(config).eval()
    with torch.no_grad():  # biases that are not 0 (a fresh model's are)
        for name, p in bert.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
    directory = save_text_model(bert, root / "bert")
    return directory, optimum_export(directory, root / "bert_onnx", "feature-extraction")


def _planted_node(path: Path, arch: str) -> str:
    """The node the bug goes into: conv2 in the CNN, layer 1's output dense Add in BERT."""
    graph = onnx.load(str(path)).graph
    inits = {t.name for t in graph.initializer}
    if arch.startswith("cnn"):
        convs = [n for n in graph.node if n.op_type == "Conv"]
        return convs[1].name
    adds = [n for n in graph.node if n.op_type == "Add" and "layer.1/output/dense" in n.name]
    assert adds and any(i in inits for i in adds[0].input), adds
    return adds[0].name


class Files:
    """Per (architecture, converter) the clean float16 file, a copy with one bias moved and
    that node's name; every export and conversion made once, when first asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.raw: dict[str, Path] = {}
        self.made: dict[tuple, tuple[Path, Path, str]] = {}
        self.bert_dir = ""

    def model(self, arch: str) -> str:
        if arch.startswith("cnn"):
            path = self.root / "cnn.py"
            path.write_text(CNN_SOURCE)
            return f"{path}:make"
        self._raw(arch)
        return f"hf:{self.bert_dir}"

    def _raw(self, arch: str) -> Path:
        if arch not in self.raw:
            if arch.startswith("cnn"):
                exporter = "legacy" if "legacy" in arch else "dynamo"
                self.raw[arch] = _export_cnn(self.root / f"cnn_{exporter}.onnx", exporter)
            else:
                self.bert_dir, self.raw[arch] = _bert(self.root)
        return self.raw[arch]

    def get(self, arch: str, tool: str, keep_io: bool) -> tuple[Path, Path, str]:
        key = (arch, tool, keep_io)
        if key not in self.made:
            stem = f"{arch.split()[0]}_{arch.split()[1].strip('():')}_{tool.split()[0]}_{keep_io}"
            clean = _convert(self._raw(arch), self.root / f"{stem}.onnx", tool, keep_io)
            node = _planted_node(clean, arch)
            bad = self.root / f"{stem}_bad.onnx"
            plant(clean, bad, node, "bias", BUMP)
            self.made[key] = (clean, bad, node)
        return self.made[key]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return Files(tmp_path_factory.mktemp("float16"))


def _run(files: Files, arch: str, path: Path, **kw) -> ValidationRun:
    hf = HfOptions(prompts=PROMPTS) if arch.startswith("BERT") else None
    return run_validation(RunConfig(model=files.model(arch), onnx=str(path), hf=hf, **kw))


def _case(files, arch, tool, keep_io) -> None:
    clean, bad, node = files.get(arch, tool, keep_io)
    option = f"keep_io_types={keep_io}"
    run = _run(files, arch, clean, layers=True, noise_floor=True)  # one story, every stage
    row = record(run, tool=tool, option=option, architecture=arch)
    assert right(row), (row, run.findings)
    noise = [c.noise for c in run.outputs if c.noise is not None]
    assert noise and {n.precision for n in noise} == {"float16"}, run.findings
    wrong = _run(files, arch, bad, layers=True)
    row = record(wrong, tool=tool, option=option, architecture=arch, planted_at=node)
    assert right(row), (row, wrong.findings)


@pytest.mark.parametrize(("tool", "keep_io"), CONVERTERS, ids=lambda v: str(v))
@pytest.mark.parametrize("arch", ARCHS[:2])
def test_a_float16_cnn_is_rounding_and_a_moved_bias_is_a_bug_at_its_node(
    files, arch, tool, keep_io
) -> None:
    _case(files, arch, tool, keep_io)


@pytest.mark.slow  # Optimum's export of a BERT, validated as hf:
@pytest.mark.parametrize(("tool", "keep_io"), CONVERTERS[:2], ids=lambda v: str(v))
def test_a_float16_bert_is_rounding_and_a_moved_bias_is_a_bug_at_its_node(
    files, tool, keep_io
) -> None:
    _case(files, ARCHS[2], tool, keep_io)


@pytest.mark.slow
def test_onnxconverter_commons_float16_bert_is_a_file_onnx_runtime_cannot_load(files) -> None:
    """onnxconverter-common 1.16 retypes the output of the attention mask's Cast (to float)
    as float16 in value_info: ONNX Runtime refuses the file, so no row can be right
    (docs/deploy.md, Limits). Parity says so rather than judging a file no runtime runs."""
    from parity.errors import OnnxLoadError

    clean, _bad, _node = files.get(ARCHS[2], "onnxconverter-common", True)
    with pytest.raises(OnnxLoadError, match="does not match expected type"):
        _run(files, ARCHS[2], clean)


SMALL = 2.5  # a bug this many times torch's own float16 error: under 10x, yet not rounding


@pytest.mark.parametrize("keep_io", [True, False], ids=lambda k: f"keep_io_types={k}")
def test_a_cnn_weight_bug_a_few_times_float16_rounding_is_a_bug(files, keep_io) -> None:
    """The rule is the fused BERT's (tests/test_deploy_fused_float16.py) on a plain graph: the
    fc's weight scaled so y moves by SMALL x torch's own float16 error (computed from the
    clean run) reads within 10x by its ratio, and is a bug by cause all the same."""
    from parity.judge.noise_floor import ROUNDING_RATIO, noise_lines

    arch = ARCHS[0]
    clean, _bad, _node = files.get(arch, "ORT float16", keep_io)
    run = _run(files, arch, clean, judge=Judge.CAUSE)
    fc = next(n.name for n in onnx.load(str(clean)).graph.node if n.op_type == "Gemm")
    bad = files.root / f"{clean.stem}_fc_small.onnx"
    plant(clean, bad, fc, "scale", scale_for_error(run, clean, fc, "y", SMALL))
    wrong = _run(files, arch, bad, judge=Judge.CAUSE)
    ratios = [c.noise.ratio for c in wrong.outputs if c.noise is not None]
    # the premise: by its worst ratio alone this bug reads as float16 rounding (at most 10x)
    assert ratios and 1.5 < max(r or 0 for r in ratios) <= ROUNDING_RATIO, ratios
    assert wrong.verdict == "fail", wrong.findings
    kinds = {f.kind for f in wrong.findings}
    assert FindingKind.BUG in kinds and FindingKind.ROUNDING not in kinds, wrong.findings
    lines = noise_lines(wrong.outputs)  # the terminal's and pages' noise lines
    assert lines and all("not rounding: its float32 twin" in line for line in lines), lines
    assert run.verdict == "pass" and FindingKind.BUG not in {f.kind for f in run.findings}
