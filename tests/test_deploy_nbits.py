"""The deploy matrix, MatMulNBits (issue 63): files made by ONNX Runtime's
MatMulNBitsQuantizer at 4 bits, blocks of 32 and 128, symmetric and not, from an MLP (legacy
export) and a tiny random Llama and Qwen2 (Optimum's export, run as hf:), all with --layers.
Each clean file passes by cause (its weights each a rounding of torch's, the file against
torch with them float32 noise: kind `quantization`, never `bug`); one node's scales x1.5 is a
bug named at that node."""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
import pytest
import torch

from parity.pipeline import RunConfig, run_validation
from parity.results import ValidationRun
from parity.run.hf_options import HfOptions
from tests.helpers.deploy_matrix import record, right
from tests.helpers.hf_models import PROMPTS, make_llama_dir
from tests.helpers.plant_bug import wrong_scale

MLP_SOURCE = """
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.fc2 = torch.nn.Linear(128, 64)
        self.fc3 = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def make():
    torch.manual_seed(0)
    return MLP().eval()
"""

OPTIONS = [(b, s) for b in (32, 128) for s in (True, False)]  # block size, symmetric
PLANTED = {  # the MatMul whose scales go wrong
    "MLP (legacy)": "/fc2/MatMul_Q4",
    "Llama (hf:)": "/model/layers.1/self_attn/q_proj/MatMul_Q4",
    "Qwen2 (hf:)": "/model/layers.1/self_attn/q_proj/MatMul_Q4",
}
LMS = ("Llama (hf:)", "Qwen2 (hf:)")


def _qwen2_dir(directory: Path) -> str:
    """A 2-layer Qwen2 (hidden 64, q/k/v with biases) with random weights and a tokenizer."""
    import transformers

    from tests.helpers.hf_models import SPECIAL, save_model

    config = transformers.Qwen2Config(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **SPECIAL,
    )  # fmt: skip
    torch.manual_seed(0)
    return save_model(transformers.Qwen2ForCausalLM(config), directory)


def _quantize(src: Path, dst: Path, block: int, symmetric: bool) -> Path:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger().setLevel(logging.ERROR)
    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(src)), bits=4, block_size=block, is_symmetric=symmetric
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return dst


class Files:
    """The raw exports, and per (architecture, block, symmetric) the int4 file and a copy
    with one node's scales x1.5; each made once, when first asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.raw: dict[str, tuple[str, Path]] = {}
        self.made: dict[tuple, tuple[Path, Path]] = {}

    def source(self, arch: str) -> tuple[str, Path]:
        """(the model as RunConfig takes it, the raw export)."""
        if arch not in self.raw:
            if arch.startswith("MLP"):
                self.raw[arch] = self._mlp()
            else:
                from optimum.exporters.onnx import main_export

                name = arch.split()[0].lower()
                make = _qwen2_dir if name == "qwen2" else make_llama_dir
                directory = make(self.root / name, **({"hidden": 64} if name == "llama" else {}))
                out = self.root / f"{name}_onnx"
                main_export(directory, output=str(out), task="text-generation-with-past",
                            no_post_process=True, do_validation=False)  # fmt: skip
                self.raw[arch] = (f"hf:{directory}", out / "model.onnx")
        return self.raw[arch]

    def _mlp(self) -> tuple[str, Path]:
        source = self.root / "mlp.py"
        source.write_text(MLP_SOURCE)
        namespace: dict = {}
        exec(compile(MLP_SOURCE, str(source), "exec"), namespace)
        raw = self.root / "mlp.onnx"
        torch.onnx.export(
            namespace["make"](), (torch.randn(2, 3, 64),), str(raw), input_names=["x"],
            output_names=["y"], dynamic_axes={"x": {0: "b", 1: "t"}}, dynamo=False,
        )  # fmt: skip
        return f"{source}:make", raw

    def get(self, arch: str, block: int, symmetric: bool) -> tuple[Path, Path]:
        key = (arch, block, symmetric)
        if key not in self.made:
            _model, raw = self.source(arch)
            stem = f"{arch.split()[0]}_{block}_{symmetric}"
            clean = _quantize(raw, self.root / f"{stem}.onnx", block, symmetric)
            bad = wrong_scale(clean, self.root / f"{stem}_bad.onnx", PLANTED[arch], 1.5)
            self.made[key] = (clean, bad)
        return self.made[key]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return Files(tmp_path_factory.mktemp("nbits"))


def _run(files: Files, arch: str, path: Path) -> ValidationRun:
    model, _raw = files.source(arch)
    hf = HfOptions(prompts=PROMPTS, max_new_tokens=4) if model.startswith("hf:") else None
    return run_validation(RunConfig(model=model, onnx=str(path), hf=hf, layers=True))


def _case(files: Files, arch: str, block: int, symmetric: bool) -> None:
    clean, bad = files.get(arch, block, symmetric)
    option = f"4 bits, block {block}, {'symmetric' if symmetric else 'asymmetric'}"
    tool = "ORT MatMulNBitsQuantizer"
    run = _run(files, arch, clean)
    q = run.quantization
    assert q is not None and q.weights and all(w.status == "rounding" for w in q.weights)
    row = record(run, tool=tool, option=option, architecture=arch)
    assert right(row), (row, run.findings)
    wrong = _run(files, arch, bad)
    node = PLANTED[arch]
    row = record(wrong, tool=tool, option=option, architecture=arch, planted_at=node)
    assert right(row), (row, wrong.findings)
    assert [w.node for w in wrong.quantization.bugs] == [node]


@pytest.mark.parametrize(("block", "symmetric"), OPTIONS, ids=lambda v: str(v))
def test_an_int4_mlp_is_its_weights_and_a_wrong_scale_is_a_bug_at_its_node(
    files, block, symmetric
) -> None:
    _case(files, "MLP (legacy)", block, symmetric)


@pytest.mark.slow  # Optimum's export of a causal LM, validated as hf: with tokens
@pytest.mark.parametrize(("block", "symmetric"), OPTIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("arch", LMS)
def test_an_int4_causal_lm_is_its_weights_and_a_wrong_scale_is_a_bug_at_its_node(
    files, arch, block, symmetric
) -> None:
    _case(files, arch, block, symmetric)
