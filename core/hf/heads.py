"""Which transformers class an `hf:DIR` model is built with: the head it was made for.

A directory saved from `BertForSequenceClassification` must be validated with its head, or
its ONNX export's `logits` has nothing to compare with. The class is chosen, in order, by:
`--task` (Optimum's task names), `config.architectures` (each name looked up in transformers'
own task tables, then by its suffix), the ONNX file's outputs when the architectures are
missing or disagree, and last the model type (a causal LM when it has one, else the base
model). Importing this module never imports transformers.

Contract: choose_model_class(config, *, task=None, onnx_outputs=None) -> ModelClass
    raises UsageError for an unknown --task, ModelLoadError when the model type has no class
    for the task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from parity.errors import ModelLoadError, UsageError
from parity.settings import Setting

GENERATE = "generate"  # a causal LM: every generate() step
FORWARD = "forward"  # one forward call (encoders, classifiers, detectors)
SEQ2SEQ = "seq2seq"  # an encoder-decoder: generation steps (parity.hf's seq2seq path)


@dataclass(frozen=True)
class Task:
    """An Optimum task: the Auto class, transformers' table of its classes, how it runs,
    its suffixes in class names and the ONNX outputs Optimum gives it (name -> rank)."""

    name: str
    auto_class: str
    table: str
    kind: str
    suffixes: tuple[str, ...]
    outputs: tuple[tuple[str, int], ...]  # (name, rank)


# Most specific first: a class name found in several tables takes the first task here.
TASKS: tuple[Task, ...] = (
    Task(
        "text-generation",
        "AutoModelForCausalLM",
        "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
        GENERATE,
        ("ForCausalLM", "LMHeadModel"),
        (("logits", 3),),
    ),
    Task(
        "text2text-generation",
        "AutoModelForSeq2SeqLM",
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        SEQ2SEQ,
        ("ForConditionalGeneration",),
        (("logits", 3),),
    ),
    Task(
        "automatic-speech-recognition",
        "AutoModelForSpeechSeq2Seq",
        "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
        SEQ2SEQ,
        (),
        (("logits", 3),),
    ),
    Task(
        "text-classification",
        "AutoModelForSequenceClassification",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
        FORWARD,
        ("ForSequenceClassification",),
        (("logits", 2),),
    ),
    Task(
        "token-classification",
        "AutoModelForTokenClassification",
        "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
        FORWARD,
        ("ForTokenClassification",),
        (("logits", 3),),
    ),
    Task(
        "question-answering",
        "AutoModelForQuestionAnswering",
        "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
        FORWARD,
        ("ForQuestionAnswering",),
        (("start_logits", 2), ("end_logits", 2)),
    ),
    Task(
        "fill-mask",
        "AutoModelForMaskedLM",
        "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
        FORWARD,
        ("ForMaskedLM",),
        (("logits", 3),),
    ),
    Task(
        "image-classification",
        "AutoModelForImageClassification",
        "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        FORWARD,
        ("ForImageClassification", "ForImageClassificationWithTeacher"),
        (("logits", 2),),
    ),
    Task(
        "object-detection",
        "AutoModelForObjectDetection",
        "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
        FORWARD,
        ("ForObjectDetection",),
        (("logits", 3), ("pred_boxes", 3)),
    ),
    Task(
        "semantic-segmentation",
        "AutoModelForSemanticSegmentation",
        "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
        FORWARD,
        ("ForSemanticSegmentation",),
        (("logits", 4),),
    ),
    Task(
        "depth-estimation",
        "AutoModelForDepthEstimation",
        "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
        FORWARD,
        ("ForDepthEstimation",),
        (("predicted_depth", 3),),
    ),
    Task(
        "audio-classification",
        "AutoModelForAudioClassification",
        "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
        FORWARD,
        ("ForAudioClassification",),
        (("logits", 2),),
    ),
    Task(
        "feature-extraction",
        "AutoModel",
        "MODEL_MAPPING_NAMES",
        FORWARD,
        ("Model",),
        (("last_hidden_state", 3),),
    ),
)
BY_NAME = {t.name: t for t in TASKS}
# Optimum's older names and its "-with-past" variants name the same tasks.
SYNONYMS = {
    "default": "feature-extraction",
    "causal-lm": "text-generation",
    "sequence-classification": "text-classification",
    "masked-lm": "fill-mask",
    "seq2seq-lm": "text2text-generation",
    "speech2seq-lm": "automatic-speech-recognition",
}
TASK_NAMES = tuple(BY_NAME)


@dataclass(frozen=True)
class ModelClass:
    """The class an hf: model is built with, and why (the report says both)."""

    task: str  # Optimum's task name
    auto_class: str  # transformers Auto class that builds it
    kind: str  # GENERATE, FORWARD or SEQ2SEQ
    chosen_by: str  # "--task", "config.architectures", "ONNX outputs" or "model type"


def task_named(name: str) -> Task:
    """The task of an Optimum task name (synonyms and "-with-past" accepted)."""
    key = name.strip().removesuffix("-with-past")
    key = SYNONYMS.get(key, key)
    if key not in BY_NAME:
        raise UsageError(
            f"not a task hf: validates; tasks: {', '.join(TASK_NAMES)}",
            setting=Setting("task", repr(name)),
        )
    return BY_NAME[key]


def choose_model_class(
    config: Any, *, task: str | None = None, onnx_outputs: Mapping[str, int] | None = None
) -> ModelClass:
    """The class for this config: --task, else its architectures, else ONNX outputs, else
    its model type. `onnx_outputs` maps the ONNX file's output names to their ranks."""
    model_type = str(getattr(config, "model_type", ""))
    if task is not None:
        return _checked(task_named(task), model_type, "--task")
    architectures = list(getattr(config, "architectures", None) or ())
    named = _dedup(_task_of_class(a) for a in architectures)
    if len(named) == 1:
        return _checked(named[0], model_type, "config.architectures")
    pool = named or [t for t in TASKS if _supports(t, model_type)]
    if onnx_outputs:
        fitting = [t for t in pool if _fits(t, onnx_outputs)]
        if len(fitting) == 1 or (fitting and len({t.kind for t in fitting}) == 1 and named):
            return _checked(fitting[0], model_type, "ONNX outputs")
    if named:
        return _checked(named[0], model_type, "config.architectures")
    # Saved from a class no task here knows (BertForPreTraining): its base model, as before.
    fallbacks = ("feature-extraction",) if architectures else ("text-generation",)
    for fallback in (*fallbacks, "feature-extraction"):
        if _supports(BY_NAME[fallback], model_type):
            return _checked(BY_NAME[fallback], model_type, "model type")
    raise ModelLoadError(
        f"model type {model_type!r} has no class for the tasks hf: validates "
        f"({', '.join(TASK_NAMES)})"
    )


def tasks_for(model_type: str) -> tuple[str, ...]:
    """The task names this model type has a class for."""
    return tuple(t.name for t in TASKS if _supports(t, model_type))


def _checked(task: Task, model_type: str, chosen_by: str) -> ModelClass:
    if not _supports(task, model_type):
        supported = ", ".join(tasks_for(model_type)) or "none"
        raise ModelLoadError(
            f"model type {model_type!r} has no {task.auto_class} class for task {task.name!r}; "
            f"its tasks: {supported}"
        )
    return ModelClass(task.name, task.auto_class, task.kind, chosen_by)


def _task_of_class(architecture: str) -> Task | None:
    """The task of a class name: transformers' tables first, then the name's suffix."""
    for task in TASKS:
        if any(architecture in names for names in _table(task).values()):
            return task
    for task in TASKS:
        if any(architecture.endswith(s) for s in task.suffixes):
            return task
    return None


def _supports(task: Task, model_type: str) -> bool:
    return model_type in _table(task)


def _fits(task: Task, outputs: Mapping[str, int]) -> bool:
    """Whether the ONNX outputs hold every output Optimum gives this task, at its rank."""
    return all(outputs.get(name) == rank for name, rank in task.outputs)


def _table(task: Task) -> Mapping[str, Any]:
    """model type -> class name(s), from transformers' auto tables."""
    from transformers.models.auto import modeling_auto

    table = getattr(modeling_auto, task.table, {})
    return {k: (v if isinstance(v, tuple) else (v,)) for k, v in table.items()}


def _dedup(tasks: Iterable[Task | None]) -> list[Task]:
    return list(dict.fromkeys(t for t in tasks if t is not None))
