"""The analyses in the order the pipeline runs them: a file exported in training mode (read
with the file: it costs nothing and explains any failure), then sizes frozen at export (they
explain a failure before anything else looks at it), the noise floor (judged per case while
the loop runs), the intended approximations (torch doing what the file means: the layers
compare against it too), layers, the quantized weights (torch again with a file's own int4 weights:
it explains what the layers found), pipeline stages side by side (several files), the
suggestion (it reads the findings the others made), the repro folder (it writes what the
layers confirmed)."""

from __future__ import annotations

from parity.analyses.answers import Answers
from parity.analyses.approximation import Approximation
from parity.analyses.frozen_sizes import FrozenSizes
from parity.analyses.interface import Analysis
from parity.analyses.layers import Layers
from parity.analyses.noise import NoiseFloor
from parity.analyses.quantization import Quantization
from parity.analyses.repro import Repro
from parity.analyses.stages import Stages
from parity.analyses.suggest import Suggest
from parity.analyses.training_mode import TrainingMode
from parity.run.config import RunConfig

ANALYSES: tuple[type[Analysis], ...] = (
    TrainingMode,
    FrozenSizes,
    NoiseFloor,
    Approximation,
    Layers,
    Quantization,
    Stages,
    Suggest,
    Repro,
)


# a data run (--data) keeps no batch's arrays: the analyses that run its cases again have
# nothing to run on (parity.run.config refuses them when asked for)
DATA_ANALYSES: tuple[type[Analysis], ...] = (Answers,)


def wanted_analyses(config: RunConfig) -> list[Analysis]:
    """A fresh instance of each analysis the config asks for (an instance lives one run)."""
    classes = DATA_ANALYSES if config.data is not None else ANALYSES
    return [stage for stage in (cls() for cls in classes) if stage.wanted(config)]
