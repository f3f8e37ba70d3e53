"""A sentence-transformers folder (`modules.json`) rebuilt as the model it says it is.

Optimum exports such a folder (found by its `modules.json`) as Transformer -> Pooling ->
Normalize, with outputs `token_embeddings` (the transformer's last hidden state) and
`sentence_embedding` (pooled, then L2-normalised). The transformers model alone has no
`sentence_embedding`: paired with its `pooler_output` (a tanh of the CLS token) a clean file
fails. So the torch side is built as sentence-transformers computes it, from the folder's
own files: the Transformer module's directory loaded as transformers' AutoModel, the pooling
modes of `1_Pooling/config.json` (cls, mean, max, mean_sqrt_len_tokens, weightedmean,
lasttoken; several are concatenated), then Normalize when listed. Its children are named
"0", "1", "2" as sentence-transformers names them, so a legacy export's scopes (`/0/encoder/
layer.0/...`, `/1/ReduceSum`) are the module paths. Importing this module never imports
torch or transformers; the sentence-transformers package is not needed.

Contract:
wanted(directory, task, onnx_outputs) -> bool
read_pipeline(directory) -> SentencePipeline   (ModelLoadError: a module hf: does not
    build, or a malformed file)
sentence_model(model, pipeline) -> the torch module (forward -> token_embeddings,
    sentence_embedding)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity.errors import ModelLoadError

MODULES = "modules.json"
OUTPUTS = ("token_embeddings", "sentence_embedding")
_LIMIT = 1 << 20
# sentence-transformers' old boolean keys, in the order its Pooling concatenates them
_OLD_KEYS = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
    ("pooling_mode_weightedmean_tokens", "weightedmean"),
    ("pooling_mode_lasttoken", "lasttoken"),
)
MODES = tuple(mode for _, mode in _OLD_KEYS)


@dataclass(frozen=True)
class SentencePipeline:
    """What `modules.json` lists: the transformer's folder (relative; "" the folder itself),
    the pooling modes, whether the embedding is normalised."""

    transformer: str
    pooling: tuple[str, ...]
    normalize: bool

    def describe(self) -> str:
        """'modules.json: Transformer -> Pooling (mean) -> Normalize'."""
        steps = ["Transformer", f"Pooling ({' + '.join(self.pooling)})"]
        return "modules.json: " + " -> ".join([*steps, *(["Normalize"] if self.normalize else [])])


def read_pipeline(directory: str | Path) -> SentencePipeline:
    """The folder's sentence-transformers pipeline (see `wanted` first)."""
    root = Path(directory)
    listed = _json(root / MODULES, directory)
    if not isinstance(listed, list) or not all(isinstance(m, dict) for m in listed):
        raise ModelLoadError(f"hf:{directory}: {MODULES} is not a list of modules")
    kinds = [str(m.get("type", "")).rpartition(".")[2] for m in listed]
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        raise ModelLoadError(
            f"hf:{directory}: {MODULES} lists {' -> '.join(kinds) or 'nothing'}; hf: builds "
            "Transformer -> Pooling (-> Normalize) only"
        )
    transformer = _inside(root, str(listed[0].get("path", "")), directory)
    pooling = _inside(root, str(listed[1].get("path", "")), directory)
    config = _json(root / pooling / "config.json", directory)
    if not isinstance(config, dict):
        raise ModelLoadError(f"hf:{directory}: {pooling}/config.json is not an object")
    return SentencePipeline(transformer, _modes(config, directory), normalize=len(kinds) == 3)


def wanted(directory: str | Path, task: str | None, onnx_outputs: Mapping[str, int] | None) -> bool:
    """Whether to build the folder's pipeline: it has a modules.json, no --task other than
    feature extraction, and an ONNX file (if given) outputs what the pipeline makes
    (Optimum's `--library transformers` export of the same folder outputs
    `last_hidden_state`: the transformer alone)."""
    if not (Path(directory) / MODULES).exists():
        return False
    if task is not None:
        from parity.hf.heads import task_named

        if task_named(task).name != "feature-extraction":
            return False
    return onnx_outputs is None or any(name in onnx_outputs for name in OUTPUTS)


def sentence_model(model: Any, pipeline: SentencePipeline) -> Any:
    """The transformers model with sentence-transformers' pooling and normalisation after
    it, as one module (in eval mode)."""
    import torch

    from parity.hf.sentence_torch import SentenceEmbedding

    built = SentenceEmbedding(model, pipeline.pooling, pipeline.normalize)
    assert isinstance(built, torch.nn.Module)
    return built.eval()


def _modes(config: Mapping[str, Any], directory: str | Path) -> tuple[str, ...]:
    given = config.get("pooling_mode")
    if isinstance(given, str):
        modes: tuple[str, ...] = (given,)
    elif isinstance(given, list):
        modes = tuple(str(m) for m in given)
    else:
        modes = tuple(mode for key, mode in _OLD_KEYS if config.get(key))
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise ModelLoadError(
            f"hf:{directory}: pooling mode {unknown or 'none'} in the Pooling config; "
            f"hf: builds {', '.join(MODES)}"
        )
    if config.get("include_prompt") is False:
        raise ModelLoadError(
            f"hf:{directory}: the Pooling config leaves the prompt out (include_prompt: "
            "false), which hf: does not rebuild"
        )
    return modes


def _inside(root: Path, relative: str, directory: str | Path) -> str:
    """A module's folder, refused when it leaves the model's folder."""
    target = (root / relative).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ModelLoadError(f"hf:{directory}: {MODULES} names a folder outside it: {relative!r}")
    return relative


def _json(path: Path, directory: str | Path) -> Any:
    from parity.files.safe_read import read_bytes

    raw = read_bytes(path, what=f"hf:{directory}:", limit=_LIMIT, error=ModelLoadError)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ModelLoadError(f"hf:{directory}: {path.name} is not JSON ({exc})") from exc
