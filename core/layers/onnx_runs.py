"""ONNX Runtime with intermediate values as extra outputs, in batches under a memory budget.

Batches are planned from the sizes the torch side reported (the same values' shapes), so
one run's extra outputs never exceed the budget. Marking a value as a graph output keeps
ONNX Runtime from fusing it away, so the optimised graph that produces intermediates can
differ slightly from the plain run's: `describe` says what was run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from parity.errors import OnnxRunError, first_line
from parity.results import InputSet


def plan_batches(
    names: Sequence[str], nbytes: Mapping[str, int], budget: int
) -> list[tuple[str, ...]]:
    """Consecutive (graph-ordered) groups whose bytes stay within `budget`; a value larger
    than the budget on its own gets a batch of its own."""
    batches: list[tuple[str, ...]] = []
    current: list[str] = []
    used = 0
    for name in names:
        size = int(nbytes.get(name, 0))
        if current and used + size > budget:
            batches.append(tuple(current))
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        batches.append(tuple(current))
    return batches


class ExtraOutputs:
    """Sessions over one ONNX file with chosen values added as outputs."""

    def __init__(self, path: str | Path, *, provider: str, opt_level: str) -> None:
        self.path = Path(path).absolute()  # links to its external data must not be relative
        self.provider = provider
        self.opt_level = opt_level
        proto = onnx.load(str(self.path), load_external_data=False)
        self._external = _uses_external_data(proto)
        # inline weights are read once here; external ones stay files that ORT maps
        self._proto = proto if self._external else onnx.load(str(self.path))
        self._n_outputs = len(self._proto.graph.output)

    @property
    def proto(self) -> onnx.ModelProto:
        """The file's model (weights inline unless they are external files)."""
        return self._proto

    @contextmanager
    def session(self, names: Sequence[str]) -> Iterator[Any]:
        """A session whose outputs are `names` (plus the graph's own); closed after use."""
        from parity.load.sessions import open_session

        graph = self._proto.graph
        del graph.output[self._n_outputs :]
        existing = {o.name for o in graph.output}
        for name in names:
            if name not in existing:
                graph.output.append(onnx.ValueInfoProto(name=name))
        with _model_source(self._proto, self.path, self._external) as source:
            try:
                # no arena: it keeps (and grows in powers of two) what the extra outputs needed;
                # external weights stay in their files, read from the model's folder
                session = open_session(
                    source,
                    provider=self.provider,
                    opt_level=self.opt_level,
                    cpu_arena=False,
                    external_folder=self.path.parent if self._external else None,
                )
            except Exception as exc:
                raise OnnxRunError(
                    f"ONNX Runtime refused {self.path} with intermediate values as outputs: "
                    f"{first_line(exc)}"
                ) from exc
        try:
            yield session
        finally:
            del session
            del graph.output[self._n_outputs :]

    @staticmethod
    def run(session: Any, names: Sequence[str], input_set: InputSet) -> dict[str, np.ndarray]:
        feeds = {k: np.ascontiguousarray(a) for k, a in input_set.feeds.items()}
        try:
            values = session.run(list(names), feeds)
        except Exception as exc:
            raise OnnxRunError(
                f"ONNX Runtime failed on input set {input_set.index} with intermediate "
                f"values as outputs: {first_line(exc)}"
            ) from exc
        return dict(zip(names, values, strict=True))


def _uses_external_data(proto: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


@contextmanager
def _model_source(proto: onnx.ModelProto, path: Path, external: bool) -> Iterator[Any]:
    """Bytes for ONNX Runtime. External weights are not read: the session is told their
    folder (ONNX Runtime refuses links to them from a temp folder: "External data path
    escapes model directory")."""
    del path, external
    yield proto.SerializeToString()
