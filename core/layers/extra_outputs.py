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
from parity.load.onnx_read import read_onnx
from parity.results import InputSet

EXTERNALIZE_OVER = 64 << 20  # inline weights past this are moved to a temp file


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
    """Sessions over one ONNX file with chosen values added as outputs.

    The graph is held without its weights: external weights stay in their files (ONNX
    Runtime is told their folder), and a file whose weights are inline and over
    `externalize_over` bytes has them written once to a temp folder as external data, so
    that neither the model kept here nor the bytes handed to ONNX Runtime for each batch
    hold a second copy of the weights (and no graph nears protobuf's 2 GB)."""

    def __init__(
        self,
        path: str | Path,
        *,
        provider: str,
        opt_level: str,
        externalize_over: int = EXTERNALIZE_OVER,
        proto: onnx.ModelProto | None = None,
    ) -> None:
        """`proto`: the model to run instead of the file's own graph (a merged decoder's
        branch, parity.layers.onnx_graph.merged_branches); its external weights are the
        file's."""
        self.path = Path(path).absolute()  # links to its external data must not be relative
        self.provider = provider
        self.opt_level = opt_level
        given = proto
        if proto is None:
            proto = read_onnx(self.path, external_data=False)
        self._external = _uses_external_data(proto)
        self.weights_dir = self.path.parent  # where the proto's external data is read from
        if not self._external:
            proto = given if given is not None else read_onnx(self.path)
            if _initializer_bytes(proto) > externalize_over:
                self.weights_dir = _externalized(proto, self)
                self._external = True
        self._proto = proto
        self._n_outputs = len(self._proto.graph.output)

    @property
    def proto(self) -> onnx.ModelProto:
        """The file's model (weights inline unless they are external files in
        `weights_dir`)."""
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
        source = self._proto.SerializeToString()  # the graph: weights stay in their files
        try:
            # no arena: it keeps (and grows in powers of two) what the extra outputs needed
            session = open_session(
                source,
                provider=self.provider,
                opt_level=self.opt_level,
                cpu_arena=False,
                external_folder=self.weights_dir if self._external else None,
            )
        except Exception as exc:
            raise OnnxRunError(
                f"ONNX Runtime refused {self.path} with intermediate values as outputs: "
                f"{first_line(exc)}"
            ) from exc
        finally:
            del source
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


def _initializer_bytes(proto: onnx.ModelProto) -> int:
    return sum(len(t.raw_data) for t in proto.graph.initializer)


def _externalized(proto: onnx.ModelProto, owner: object) -> Path:
    """Write `proto`'s inline weights to a temp folder as external data (their raw bytes
    are dropped from `proto`); the folder is removed when `owner` is collected."""
    import shutil
    import tempfile
    import weakref

    from onnx.external_data_helper import (
        convert_model_to_external_data,
        write_external_data_tensors,
    )

    folder = Path(tempfile.mkdtemp(prefix="parity-layers-weights-"))
    weakref.finalize(owner, shutil.rmtree, folder, ignore_errors=True)
    convert_model_to_external_data(proto, location="weights.bin", size_threshold=1024)
    write_external_data_tensors(proto, str(folder))  # clears each tensor's raw_data
    return folder
