"""Shared fixtures, each built once per session in tmp dirs: tiny real models and their real
exports, the candidates' exports, a Llama directory, moto's S3 server, and for the browser
tests one Chromium and one `streamlit run app.py` server.

The models live in a Python file written to a temp dir, so the same source serves the
``FILE.py:CALLABLE`` and ``module:CALLABLE`` specs and the exports made from it.

Browser tests (marked `browser`, which every test using `chromium` is) run last, module by
module in their usual order: Playwright's sync API marks its event loop as running between
calls, so no other test's asyncio code may run while the session's Chromium is open.

`python -m pytest` runs everything on pytest-xdist workers (pyproject's addopts: `-n auto
--dist loadfile`, sized by pytest_xdist_auto_num_workers below); each worker builds its own
session fixtures, and a module runs whole on one worker. `-n 0` runs in this process alone
(for a debugger); `-m "not slow and not browser"` is the quick loop (no transformers
exports, sweeps, wheel builds or Chromium).
"""

from __future__ import annotations

import os
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.helpers.moto_s3 import Moto

MODELS_MODULE = "parity_test_models"

MODELS_SOURCE = textwrap.dedent(
    '''
    """Tiny models for Parity's tests (written to a temp dir by tests/conftest.py)."""
    import torch
    from torch import nn


    class Tiny(nn.Module):
        """x [batch, 4] -> [batch, 3]."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)


    class Tokens(nn.Module):
        """ids, attention_mask [batch, seq] -> {"logits", "extra": (sum, scaled)}."""

        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 6)
            self.fc = nn.Linear(6, 5)

        def forward(self, input_ids, attention_mask):
            h = self.emb(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)
            return {"logits": self.fc(h), "extra": (h.sum(-1), h * 2.0)}


    class RaisesOnBigBatch(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            if x.shape[0] > 2:
                raise RuntimeError("batch too big for this model\\nsecond line")
            return self.fc(x)


    def make_tiny():
        torch.manual_seed(0)
        return Tiny()


    def make_tokens():
        torch.manual_seed(0)
        return Tokens()


    def make_raising():
        torch.manual_seed(0)
        return RaisesOnBigBatch()


    def broken_factory():
        raise ValueError("bad config: depth must be > 0\\nsecond line")


    def not_a_module():
        return 42


    tiny_instance = make_tiny()
    '''
)


@dataclass(frozen=True)
class ModelZoo:
    dir: Path
    file: Path

    def spec(self, factory: str) -> str:
        return f"{self.file}:{factory}"

    def build(self, factory: str) -> torch.nn.Module:
        from parity.load.torch_model import load_torch_model

        return load_torch_model(self.spec(factory)).module  # type: ignore[return-value]


@dataclass(frozen=True)
class TinyArtifacts:
    """Exports and weight files of ``Tiny`` (x [batch, 4] -> y [batch, 3])."""

    onnx: Path  # dynamo=False, input "x", output "y", dim "batch"
    pt2: Path
    torchscript: Path
    state_pt: Path  # a state dict with weights other than make_tiny()'s
    state_safetensors: Path  # the same state dict
    pickled_module: Path  # a whole pickled nn.Module: must be refused as weights
    state: dict[str, torch.Tensor]


@pytest.fixture(scope="session")
def model_zoo(tmp_path_factory: pytest.TempPathFactory) -> ModelZoo:
    root = tmp_path_factory.mktemp("zoo")
    file = root / f"{MODELS_MODULE}.py"
    file.write_text(MODELS_SOURCE)
    return ModelZoo(dir=root, file=file)


@pytest.fixture(scope="session")
def tiny_artifacts(model_zoo: ModelZoo, tmp_path_factory: pytest.TempPathFactory) -> TinyArtifacts:
    from safetensors.torch import save_file

    out = tmp_path_factory.mktemp("tiny")
    model = model_zoo.build("make_tiny")
    with warnings.catch_warnings():  # the legacy exporter and jit warn they are deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        x = torch.randn(2, 4)
        onnx_path = out / "tiny.onnx"
        torch.onnx.export(
            model,
            (x,),
            str(onnx_path),
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        )
        pt2 = out / "tiny.pt2"
        batch = torch.export.Dim("batch")
        torch.export.save(torch.export.export(model, (x,), dynamic_shapes=({0: batch},)), str(pt2))
        ts = out / "tiny.ts"
        torch.jit.save(torch.jit.script(model), str(ts))
        state = {k: v + 1.0 for k, v in model.state_dict().items()}
        state_pt = out / "tiny_state.pt"
        torch.save(state, str(state_pt))
        state_st = out / "tiny_state.safetensors"
        save_file(state, str(state_st))
        pickled = out / "tiny_module.pt"
        torch.save(model, str(pickled))
    return TinyArtifacts(
        onnx=onnx_path,
        pt2=pt2,
        torchscript=ts,
        state_pt=state_pt,
        state_safetensors=state_st,
        pickled_module=pickled,
        state=state,
    )


@pytest.fixture(scope="session")
def tokens_onnx(model_zoo: ModelZoo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``Tokens`` exported with dynamo=True, symbolic "batch" and "seq"; outputs named
    "logits", "sum", "scaled" (only "logits" equals a torch leaf path)."""
    out = tmp_path_factory.mktemp("tokens") / "tokens.onnx"
    model = model_zoo.build("make_tokens")
    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    with warnings.catch_warnings():  # notes on axis renaming, not problems
        warnings.simplefilter("ignore", UserWarning)
        program = torch.onnx.export(
            model,
            (ids, mask),
            dynamo=True,
            dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
            output_names=["logits", "sum", "scaled"],
            verbose=False,
        )
    program.save(str(out))
    return out


@pytest.fixture(scope="session")
def candidate_exports(tmp_path_factory: pytest.TempPathFactory):
    """The six exports of tests/helpers/candidate_exports.py (dynamo, legacy, buggy, fp16, renamed,
    the .pt2), made once for the CLI, dashboard and browser tests of candidates."""
    from tests.helpers.candidate_exports import build

    return build(tmp_path_factory.mktemp("candidates"))


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny Llama directory (tests/helpers/hf_models.py); tests read it, never write into it."""
    from tests.helpers.hf_models import make_llama_dir

    return make_llama_dir(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Moto | None]:
    """moto's S3 server (tests/helpers/moto_s3.py), one a session (a pytest-xdist worker) for
    the modules that put keys of their own in its bucket and never stop it; None without s3fs
    or moto's server (the dev extra), so that a Ray cluster can start without it."""
    try:
        import moto.server  # noqa: F401
        import s3fs  # noqa: F401
    except ImportError:
        yield None
        return
    server = Moto()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server: Moto | None, monkeypatch: pytest.MonkeyPatch) -> Moto:
    """The session's S3 server, named in this (the driver's) environment for one test."""
    if s3_server is None:
        pytest.skip("needs s3fs and moto[server] (the dev extra)")
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    """One headless Chromium for the session's browser tests; each test module opens its own
    context (its own Streamlit session, cookies, downloads)."""
    from playwright import sync_api

    from tests.helpers.browser import HOST_RULES, launch

    with sync_api.sync_playwright() as pw:
        browser = launch(pw, HOST_RULES)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """The URL of one `streamlit run app.py` (default settings) for the session's browser
    tests; a saved run or a sweep opens in it as ?run=PATH or ?sweep=DIR."""
    from tests.helpers.browser import ARTIFACTS, serve_app

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")  # one server, one log per worker
    with serve_app(ARTIFACTS / f"streamlit-{worker}.log") as url:
        yield url


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): one worker per CPU and one more, 2 to 4. Much of the
    suite waits (browser pages, sweep timeouts, servers starting), so a 2-core machine keeps
    busy with 3; each worker builds its own session fixtures and holds ~2 GB."""
    return max(2, min(len(os.sched_getaffinity(0)) + 1, 4))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses the session's Chromium `browser`; run the modules that hold
    browser tests after all others, and in each group the modules holding `slow` tests
    first, so the longest start early on the workers (a stable sort: modules stay whole and
    keep their tests' order; `--dist loadfile` hands modules out in this order)."""
    browser_modules, slow_modules = set(), set()
    for item in items:
        if "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
        if item.get_closest_marker("browser") is not None:
            browser_modules.add(item.path)
        if item.get_closest_marker("slow") is not None:
            slow_modules.add(item.path)
    items.sort(key=lambda item: (item.path in browser_modules, item.path not in slow_modules))


def pytest_sessionstart(session: pytest.Session) -> None:
    """The controller (or a run without workers) starts the deploy matrix's rows afresh
    (tests.helpers.deploy_matrix); workers append to them."""
    if not hasattr(session.config, "workerinput"):
        from tests.helpers.deploy_matrix import ROWS

        ROWS.unlink(missing_ok=True)


def pytest_configure(config: pytest.Config) -> None:
    """`PARITY_TEST_ORT_THREADS=N`: every ONNX Runtime session this process opens (Parity's
    and the tests' own) runs on N intra-op threads. ONNX Runtime sizes its pool by the
    machine's cores, and MLAS splits its work by the pool, so CI's machine may round in
    another order than this one: the suite is checked under other splits with it
    (docs/development.md, "Any CPU"). Sessions of a subprocess keep the default."""
    threads = os.environ.get("PARITY_TEST_ORT_THREADS")
    if not threads:
        return
    import onnxruntime as ort

    opened = ort.InferenceSession.__init__

    def init(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kw):
        options = sess_options if sess_options is not None else ort.SessionOptions()
        options.intra_op_num_threads = int(threads)
        opened(self, path_or_bytes, options, providers, provider_options, **kw)

    ort.InferenceSession.__init__ = init
