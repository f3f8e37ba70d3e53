"""Every name or axis a setting gives (``--tol NAME=``, a tolerances file's outputs, ``--dim
NAME:`` and ``INPUT:AXIS``, ``--int-range NAME=``), checked against the ONNX files' signatures
before torch or the model loads: a typo is refused in well under a second, not after a model
has loaded for ten. The files' graphs are read without their weights; a file that cannot be
read is left to the load, which names it in its own words.
"""

from __future__ import annotations

from pathlib import Path

from parity.results import RunKind
from parity.run.config import RunConfig
from parity.signature import OnnxSignature

__all__ = ["check_names", "signature_of"]


def signature_of(path: str | Path) -> OnnxSignature | None:
    """The file's signature from its graph alone (no weights, no checker), or None."""
    import onnx

    from parity.errors import OnnxLoadError
    from parity.files.safe_read import open_regular
    from parity.load.onnx_model import MAX_PROTO, read_signature

    try:
        with open_regular(Path(path), what="ONNX file", limit=MAX_PROTO, error=OnnxLoadError) as fh:
            proto = onnx.load(fh, load_external_data=False)
        return read_signature(proto, where=path)
    except Exception:  # unreadable: the load says why, in its words
        return None


def check_names(config: RunConfig) -> None:
    """UsageError (naming the setting) for a tolerance of an output no file has, or a dim,
    axis or input name the generated inputs' signature lacks; nothing for an hf: run (its
    files are made or split by the run) or a run whose ONNX file is not made yet."""
    if config.kind is RunKind.HF_GENERATE:
        return
    files: tuple[str | Path, ...] = config.onnx_files
    if not files:  # a demo's own export, when it is there without exporting
        from parity.load.demos import ready_demo_onnx
        from parity.load.specs import demo_name

        name = demo_name(config.model)
        ready = None if name is None else ready_demo_onnx(name)
        files = () if ready is None else (ready,)
    signatures = [s for s in map(signature_of, files) if s is not None]
    if not signatures:
        return
    if config.tolerances.outputs:
        names: dict[str, None] = {}
        for s in signatures:
            names.update(dict.fromkeys(s.output_names))
        config.tolerances.check_outputs(tuple(names))
    if config.n_given_sets == 0 and config.kind is not RunKind.REFERENCE:
        from parity.run.inputs import check_input_options, set_count

        check_input_options(
            signatures[0],
            dims=config.dims,
            n_sets=set_count(config.n_input_sets, signatures[0]),
            seed=config.seed,
            int_ranges=config.int_ranges,
        )
