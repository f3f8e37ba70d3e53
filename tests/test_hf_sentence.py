"""sentence-transformers folders on hf: runs (issue 63): Optimum's export of a folder with
`modules.json` outputs `token_embeddings` and `sentence_embedding` (Pooling, Normalize);
the torch side is built from the folder's own modules.json and Pooling config, paired by
name, never with BertModel's `pooler_output`. Tiny folders written here, exported by
Optimum (its sentence-transformers library path) and by Parity itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from parity.errors import ModelLoadError
from parity.hf.sentence import SentencePipeline, read_pipeline
from parity.pipeline import RunConfig, run_validation
from parity.results import Status
from parity.run.hf_options import HfOptions
from tests.helpers.deploy_matrix import record, right
from tests.helpers.hf_models import PROMPTS
from tests.helpers.hf_tasks import make_sentence_dir

pytest.importorskip("optimum.exporters.onnx")
pytest.importorskip("sentence_transformers")  # Optimum's sentence-transformers export

pytestmark = pytest.mark.slow  # Optimum exports


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two folders (mean + Normalize; max and cls concatenated, no Normalize), each with
    Optimum's default (sentence-transformers) export."""
    from optimum.exporters.onnx import main_export

    root = tmp_path_factory.mktemp("sentence")
    made: dict[str, Path] = {}
    for name, pooling, normalize in (("mean", ("mean",), True), ("maxcls", ("cls", "max"), False)):
        directory = Path(make_sentence_dir(root / name, pooling=pooling, normalize=normalize))
        main_export(str(directory), output=root / f"{name}_onnx", task="feature-extraction")
        made[name] = directory
        made[f"{name}_onnx"] = root / f"{name}_onnx" / "model.onnx"
    return made


def _run(directory: Path, onnx: Path | None, **extra):
    options = HfOptions(prompts=PROMPTS, export_path=extra.pop("export_path", None))
    return run_validation(
        RunConfig(
            model=f"hf:{directory}", onnx=None if onnx is None else str(onnx), hf=options, **extra
        )
    )


def test_the_folder_says_its_pipeline(folders) -> None:
    assert read_pipeline(folders["mean"]) == SentencePipeline("", ("mean",), normalize=True)
    assert read_pipeline(folders["maxcls"]) == SentencePipeline("", ("cls", "max"), False)


def test_optimum_sentence_export_passes_paired_by_name_with_layers(folders) -> None:
    run = _run(folders["mean"], folders["mean_onnx"], layers=True)
    assert run.verdict == "pass", [f.text for f in run.findings]
    row = record(run, tool="Optimum export", option="sentence-transformers folder",
                 architecture="BERT + mean pooling + normalize")  # fmt: skip
    assert right(row), row
    assert set(run.output_names) == {"token_embeddings", "sentence_embedding"}
    assert all(c.status == Status.PASS for c in run.outputs)
    assert "modules.json" in run.generation.summary["class_chosen_by"]
    layers = run.layers
    assert layers.first_divergence is None and layers.matched > 0
    modules = {v.onnx_value: v.torch_module for v in layers.values}
    assert modules["sentence_embedding"] == "2"  # Normalize's output, the pooling's before it
    assert "1" in modules.values()
    # padded rows of the token embeddings are not judged, as last_hidden_state's are not
    assert any(c.n_excluded for c in run.outputs if c.name == "token_embeddings")


def test_cls_and_max_pooling_concatenated_as_the_config_says(folders) -> None:
    run = _run(folders["maxcls"], folders["maxcls_onnx"])
    assert run.verdict == "pass", [f.text for f in run.findings]
    sentence = next(c for c in run.outputs if c.name == "sentence_embedding")
    assert sentence.ref_shape is not None and sentence.ref_shape[-1] == 64  # 2 x hidden 32


def test_a_pooling_other_than_the_files_is_a_failure(folders, tmp_path) -> None:
    """The same weights with mean pooling but no Normalize, against the normalised file:
    the token embeddings agree, the sentence embedding does not (the torch side computes
    what the folder says, not what the file holds)."""
    other = tmp_path / "unnormalised"
    shutil.copytree(folders["mean"], other)
    listed = json.loads((other / "modules.json").read_text())
    (other / "modules.json").write_text(json.dumps(listed[:2]))
    run = _run(other, folders["mean_onnx"])
    status = {c.name: c.status for c in run.outputs}
    assert status == {"token_embeddings": Status.PASS, "sentence_embedding": Status.FAIL}


def test_parity_own_export_of_the_folder_has_both_outputs(folders, tmp_path) -> None:
    run = _run(folders["mean"], None, export_path=str(tmp_path / "own.onnx"))
    assert run.verdict == "pass", [f.text for f in run.findings]
    assert set(run.output_names) == {"token_embeddings", "sentence_embedding"}


def test_a_transformers_library_export_is_the_transformer_alone(folders, tmp_path) -> None:
    """`--library transformers` exports `last_hidden_state`: the folder's BertModel."""
    from optimum.exporters.onnx import main_export

    out = tmp_path / "plain"
    main_export(
        str(folders["mean"]), output=out, task="feature-extraction", library_name="transformers"
    )
    run = _run(folders["mean"], out / "model.onnx")
    assert run.verdict == "pass", [f.text for f in run.findings]
    assert run.generation.summary["architecture"] == "BertModel"


def test_a_module_hf_does_not_build_is_said(folders, tmp_path) -> None:
    other = tmp_path / "dense"
    shutil.copytree(folders["mean"], other)
    listed = json.loads((other / "modules.json").read_text())
    listed.insert(
        2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    )
    (other / "modules.json").write_text(json.dumps(listed))
    with pytest.raises(ModelLoadError, match="Transformer -> Pooling -> Dense -> Normalize"):
        read_pipeline(other)
