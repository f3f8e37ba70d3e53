"""Issue 23, UNSAFE: every byte a file can make Parity allocate is counted first, and a file's
expression text cannot take the CPU. Each case is a real file: a `torch.export.save` archive
edited member by member, real `.npz` zips, a real transformers config directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from parity.errors import UsageError
from tests.conftest import TinyArtifacts
from tests.helpers.archive_edits import ZERO_MIB, first_expr, json_edit, rewrite_zip

_BATCH = (
    """
import contextlib, io, json, os, resource, sys
if os.environ.get("BOUNDS_LIMIT_AS"):  # a regression fails with MemoryError, not the machine
    limit = int(os.environ["BOUNDS_LIMIT_AS"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from parity.cli import main
def peak():  # this process's own high-water mark: VmHWM (ru_maxrss starts at the forking
    try:     # parent's, a pytest worker's gigabytes, where the child was made by fork + exec)
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
results = {}
for name, args in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    results[name] = [code, err.getvalue()]
results["peak_kib"] = peak()
print(json.dumps(results))
"""
).strip()


def _run_batch(
    cases: dict[str, list[str]], timeout: float = 300, *, limit_as: int | None = None
) -> dict[str, list]:
    """`parity validate` for each case in one fresh process (in-process calls of
    parity.cli.main), bounded by `timeout`: a case that spins fails the test instead of
    hanging the suite."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _BATCH, json.dumps(cases)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "BOUNDS_LIMIT_AS": str(limit_as or "")},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout:g} s: one of {sorted(cases)} spins")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _one_line(result: list) -> str:
    code, err = result
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("parity: error: "), err
    return lines[0]


# --- 1. symbolic-shape expressions --------------------------------------------------------

EXPRESSIONS = {
    "floor_float": "floor(Float('1e1000000000'))",
    "float_spins": "Float('1e10000000')",
    "tiny_float": "Float('1e-10000000')",
    "ceiling": "ceiling(Float('1e1000000000'))",
    "floor_to_int": "FloorToInt(Float('1e1000000000'))",
    "ceil_to_int": "CeilToInt(Float('1e1000000000'))",
    "trunc_to_int": "TruncToInt(Float('1e1000000000'))",
    "round_to_int": "RoundToInt(Float('1e1000000000'))",
    "identity": "Identity(Float('1e1000000000'))",
    "mod": "Mod(Float('1e1000000000'), 7)",
    "many_digits": "floor(Float('" + "9" * 3000 + "'))",
    "power_tower": "2**10**10",
    "built_power": "Pow(Integer(2), Mul(Integer(1000), Integer(1000)))",
    "float_powers": "floor(Pow(Pow(Pow(Float('1e300'), 64), 64), 64))",
    "symbolic_exponent": "Pow(Integer(2), Symbol('s31', positive=True, integer=True))",
    "huge_integer": "Integer(" + "9" * 1300 + ")",
    "deep": "Max(" * 150 + "Integer(1)" + ", Integer(1))" * 150,
}


def test_crafted_expressions_are_refused_in_one_line_and_quickly(
    tiny_artifacts: TinyArtifacts, tmp_path: Path
) -> None:
    cases = {}
    for name, text in EXPRESSIONS.items():

        def plant(document: dict, text: str = text) -> None:
            first_expr(document)["expr_str"] = text

        bad = rewrite_zip(
            tiny_artifacts.pt2, tmp_path / f"{name}.pt2", {"models/model.json": json_edit(plant)}
        )
        cases[name] = ["validate", "--model", str(bad), "--onnx", str(tiny_artifacts.onnx)]
        cases[name] += ["--timeout", "60"]
    cases["control"] = ["validate", "--model", str(tiny_artifacts.pt2)]
    cases["control"] += ["--onnx", str(tiny_artifacts.onnx), "--timeout", "60"]
    results = _run_batch(cases)
    assert results["control"][0] == 0, results["control"]
    for name, text in EXPRESSIONS.items():
        line = _one_line(results[name])
        assert "models/model.json" in line and "expr_str" in line, (name, line)
        assert repr(text[:60]) in line, (name, line)
    assert results["peak_kib"] < 2 << 20, results["peak_kib"]  # KiB: under 2 GiB


def test_ordinary_float_and_power_expressions_still_build() -> None:
    """The bounds refuse what is too big, not what a .pt2 ordinarily carries: each of these
    builds the value it spells (a float at full precision, powers, a big but finite floor)."""
    import sympy

    from parity.load.pt2_sympy import parse_expression

    s0 = sympy.Symbol("s0", integer=True)
    built = {
        "Float('0.5', precision=53)": sympy.Float(0.5),
        "Float('1.2345678901234567e-5', precision=53)": sympy.Float(
            "1.2345678901234567e-5", precision=53
        ),
        "PowByNatural(Symbol('s0', integer=True), Integer(2))": s0**2,
        "Pow(Symbol('s0', integer=True), Rational(1, 2))": sympy.sqrt(s0),
        "floor(Mul(Float('1e300'), Float('1e300')))": sympy.floor(
            sympy.Float("1e300") * sympy.Float("1e300")
        ),
    }
    for text, value in built.items():
        got = parse_expression(text, {})
        assert got == value, (text, got)


# --- 2. weights and constants --------------------------------------------------------------


def _weight(sizes: list[int]) -> Callable[[dict], None]:
    def declare(document: dict) -> None:
        meta = document["config"]["fc.weight"]["tensor_meta"]
        meta["sizes"] = [{"as_int": n} for n in sizes]
        strides = [1]
        for n in reversed(sizes[1:]):
            strides.insert(0, strides[0] * n)
        meta["strides"] = [{"as_int": n} for n in strides]

    return declare


def test_weights_are_sized_from_their_declaration_before_anything_is_read(
    tiny_artifacts: TinyArtifacts, tmp_path: Path
) -> None:
    config = "model_weights_config.json"
    empty = rewrite_zip(
        tiny_artifacts.pt2,
        tmp_path / "empty.pt2",
        {config: json_edit(_weight([16384, 16384])), "weights/weight_0": lambda _: b""},
    )
    deflated = rewrite_zip(  # 64 MiB of zeros where [3, 4] float32 (48 bytes) is declared
        tiny_artifacts.pt2, tmp_path / "deflated.pt2", {}, zeros={"weights/weight_0": 64 << 20}
    )
    consistent = rewrite_zip(  # 64 MiB of zeros, declared [4096, 4096] float32: over 16M
        tiny_artifacts.pt2,
        tmp_path / "big.pt2",
        {config: json_edit(_weight([4096, 4096]))},
        zeros={"weights/weight_0": 64 << 20},
    )
    assert deflated.stat().st_size < 1 << 20 and consistent.stat().st_size < 1 << 20
    onnx = str(tiny_artifacts.onnx)
    # the 1 GiB declaration in a process of its own: its peak is that case's alone
    alone = _run_batch(
        {"empty": ["validate", "--model", str(empty), "--onnx", onnx, "--max-memory", "256M"]}
    )
    line = _one_line(alone["empty"])
    assert "data/weights/weight_0" in line and "holds 0 bytes" in line, line
    assert "fc.weight float32 [16384, 16384] declares 1073741824" in line, line
    assert alone["peak_kib"] < 1 << 20, alone["peak_kib"]  # KiB: the 1 GiB was never made
    results = _run_batch(
        {
            "deflated": ["validate", "--model", str(deflated), "--onnx", onnx],
            "consistent": ["validate", "--model", str(consistent), "--onnx", onnx]
            + ["--max-memory", "16M"],
            "default_budget": ["validate", "--model", str(consistent), "--onnx", onnx],
        }
    )
    line = _one_line(results["deflated"])
    assert f"holds {64 << 20} bytes" in line and "declares 48" in line, line
    line = _one_line(results["consistent"])
    assert "needs 64.0 MiB, over the 16.0 MiB memory budget" in line, line
    assert "fc.weight float32 [4096, 4096]" in line, line
    # under the default budget the consistent archive reaches torch, which finds the program's
    # [3, 4] weight is not [4096, 4096]: still one line, and nothing was allocated before
    _one_line(results["default_budget"])


def test_a_pickled_payload_is_sized_by_what_its_own_zip_inflates_to(
    tiny_artifacts: TinyArtifacts, tmp_path: Path, capsys
) -> None:
    import io

    import torch

    from parity.cli import main

    saved = io.BytesIO()
    torch.save(((torch.zeros(16 << 20),), {}), saved)  # 64 MiB of sample inputs
    deflated = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(saved.getvalue())) as zin,
        zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zout,
    ):
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    assert len(deflated.getvalue()) < 1 << 20
    bad = rewrite_zip(
        tiny_artifacts.pt2,
        tmp_path / "samples.pt2",
        {"sample_inputs/model.pt": lambda _: deflated.getvalue()},
    )
    args = ["validate", "--model", str(bad), "--onnx", str(tiny_artifacts.onnx)]
    assert main([*args, "--max-memory", "16M"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs 64.0 MiB, over the 16.0 MiB memory budget" in err[0], err
    assert str(bad) in err[0]


# --- 3. .npz members, whatever their names -------------------------------------------------


def _npz(path: Path, members: dict[str, tuple[str, tuple[int, ...]] | np.ndarray]) -> Path:
    """An .npz written member by member: an array, or (dtype, shape) of zeros streamed
    deflated after a real .npy header; a name without .npy is kept as given."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, value in members.items():
            with zf.open(name, "w") as member:
                if isinstance(value, np.ndarray):
                    np.lib.format.write_array(member, value, allow_pickle=False)
                    continue
                dtype, shape = value
                if dtype != "raw":
                    header = {"descr": dtype, "fortran_order": False, "shape": shape}
                    np.lib.format.write_array_header_1_0(member, header)
                n_bytes = int(np.prod(shape)) * (1 if dtype == "raw" else np.dtype(dtype).itemsize)
                for _ in range(n_bytes // len(ZERO_MIB)):
                    member.write(ZERO_MIB)
    assert path.stat().st_size < 1 << 20
    return path


def test_every_npz_member_counts_against_the_budget(
    tiny_artifacts: TinyArtifacts, tmp_path: Path, capsys
) -> None:
    from parity.cli import main

    big = ("<f4", (4 << 20, 4))  # 64 MiB
    small = np.zeros((2, 4), np.float32)
    onnx = ["--onnx", str(tiny_artifacts.onnx), "--max-memory", "16M"]
    model = ["--model", str(tiny_artifacts.pt2)]
    feeds = _npz(tmp_path / "feeds.npz", {"x.npy": small})
    cases = {
        "unsuffixed": (model, _npz(tmp_path / "x.npz", {"x": big}), None),
        "shadowed": (model, _npz(tmp_path / "both.npz", {"x.npy": small, "x": big}), None),
        "junk": (
            model,
            _npz(tmp_path / "junk.npz", {"x.npy": small, "junk": ("raw", (64 << 20,))}),
            None,
        ),
        "reference": ([], feeds, _npz(tmp_path / "ref.npz", {"y": ("<f4", (8 << 20, 2))})),
        "reference_junk": ([], feeds, _npz(tmp_path / "rj.npz", {"junk": ("raw", (64 << 20,))})),
    }
    for name, (model_args, inputs, reference) in cases.items():
        args = ["validate", *model_args, *onnx, "--inputs", str(inputs)]
        if reference is not None:
            args += ["--reference", str(reference)]
        code = main(args)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, (name, err)
        shown = reference if reference is not None else inputs
        assert str(shown) in err[0], (name, err)
        if name == "shadowed":
            assert "'x.npy' and 'x' are both read as 'x'" in err[0], err
        else:
            assert "over the 16.0 MiB memory budget" in err[0], (name, err)
    # a feeds file whose members are all .npy arrays still runs
    assert main(["validate", *model, *onnx, "--inputs", str(feeds)]) == 0


# --- 4. hf: directories ---------------------------------------------------------------------

_EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.hf_models import make_llama_dir

    return Path(make_llama_dir(tmp_path_factory.mktemp("llama") / "llama"))


def _copy_dir(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("where", ["config", "tokenizer"])
def test_a_directory_asking_to_run_its_code_is_refused_without_a_prompt(
    where: str, llama_dir: Path, tmp_path: Path
) -> None:
    directory = _copy_dir(llama_dir, tmp_path / "evil_dir")
    marker = tmp_path / "marker"
    (directory / "evil.py").write_text(_EVIL.format(marker=str(marker)))
    if where == "config":  # a model type transformers does not know: it would ask
        (directory / "config.json").write_text(
            json.dumps(
                {
                    "model_type": "evil-model",
                    "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"},
                }
            )
        )
        name = "config.json"
    else:
        _edit_json(
            directory / "tokenizer_config.json",
            auto_map={"AutoTokenizer": ["evil.EvilTokenizer", None]},
            tokenizer_class="EvilTokenizer",
        )
        name = "tokenizer_config.json"
    done = subprocess.run(
        [sys.executable, "-m", "parity", "validate", "--model", f"hf:{directory}"]
        + ["--random-weights", "--max-new-tokens", "1"],
        input="y\n" * 50,  # what a user answering transformers' prompt would type
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0] == (
        f"parity: error: hf:{directory}: {name} asks to run its own code (auto_map); "
        "Parity never runs a directory's code"
    ), lines
    assert "custom code" not in done.stdout + done.stderr
    assert not marker.exists()


def test_every_transformers_load_refuses_remote_code() -> None:
    """Each from_pretrained / from_config call in parity.hf passes trust_remote_code=False."""
    import ast

    import parity.hf

    calls = 0
    for file in Path(parity.hf.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("from_pretrained", "from_config")
            ):
                calls += 1
                keywords = {k.arg: k.value for k in node.keywords}
                value = keywords.get("trust_remote_code")
                assert isinstance(value, ast.Constant) and value.value is False, (
                    f"{file.name}:{node.lineno}"
                )
    assert calls >= 5


HUGE_CONFIGS = {
    "layers": {"num_hidden_layers": 1_000_000},
    "width": {"hidden_size": 2_000_000_000, "intermediate_size": 64},
    "vocab": {"vocab_size": 3_000_000_000},
}


def test_a_config_asking_for_a_huge_model_is_refused_before_it_is_built(
    llama_dir: Path, tmp_path: Path
) -> None:
    cases = {}
    for name, changes in HUGE_CONFIGS.items():
        directory = _copy_dir(llama_dir, tmp_path / name)
        _edit_json(directory / "config.json", **changes)
        cases[name] = ["validate", "--model", f"hf:{directory}", "--random-weights"]
    small = ["validate", "--model", f"hf:{llama_dir}", "--random-weights", "--max-memory", "1K"]
    cases["budget"] = small
    results = _run_batch(cases, limit_as=16 << 30)
    for name, changes in HUGE_CONFIGS.items():
        line = _one_line(results[name])
        assert f"hf:{tmp_path / name}'s model (an estimated" in line, (name, line)
        assert "over the 4.0 GiB memory budget" in line, (name, line)
        key, value = next(iter(changes.items()))
        assert f"{key} {value}" in line, (name, line)
    line = _one_line(results["budget"])
    assert "over the 1.0 KiB memory budget" in line and "hidden_size 32" in line, line
    assert results["peak_kib"] < 2 << 20, results["peak_kib"]


def test_the_estimate_bounds_real_models() -> None:
    import transformers

    from parity.hf.size import estimate_parameters

    for config in (
        transformers.LlamaConfig(
            vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2
        ),
        transformers.BertConfig(
            vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2
        ),
        transformers.T5Config(vocab_size=64, d_model=16, d_ff=32, num_layers=2, num_heads=2),
        transformers.ViTConfig(
            hidden_size=16, num_hidden_layers=2, intermediate_size=32, num_attention_heads=2
        ),
    ):
        model = transformers.AutoModel.from_config(config)
        real = sum(p.numel() for p in model.parameters())
        assert real <= estimate_parameters(config) <= 20 * real + 100_000, type(config).__name__


# --- 5. sweep pairs write only inside --out ------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--model-explorer", "{outside}"],
            "--model-explorer {outside}: give a plain name (no folder)",
        ),
        (
            ["--model-explorer={outside}"],
            "--model-explorer {outside}: give a plain name (no folder)",
        ),
        (["--model-exp={outside}"], "write --model-explorer in full, not --model-exp"),
        (["--export-path", "{outside}"], "--export-path {outside}: give a plain name (no folder)"),
        (
            ["--save-reference=../ref.npz"],
            "--save-reference ../ref.npz: give a plain name (no folder)",
        ),
    ],
)
def test_no_flag_that_writes_can_name_a_file_outside_the_pair_folder(
    args: list[str], expected: str, tiny_artifacts: TinyArtifacts, model_zoo, tmp_path: Path, capsys
) -> None:
    import shutil

    from parity.cli import main

    zoo = tmp_path / "zoo"
    zoo.mkdir()
    shutil.copy(tiny_artifacts.onnx, zoo / "tiny.onnx")
    shutil.copy(model_zoo.file, zoo / "models.py")
    outside = tmp_path / "victim.json"
    outside.write_text("keep me")
    pair_args = ["--model", "models.py:make_tiny", "--onnx", "tiny.onnx", "--layers"]
    pair_args += [a.format(outside=outside) for a in args]
    (zoo / "manifest.json").write_text(
        json.dumps({"schema": "parity.sweep/1", "pairs": [{"name": "a", "args": pair_args}]})
    )
    out = tmp_path / "out"
    assert main(["sweep", str(zoo / "manifest.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected.format(outside=outside) in err, err
    assert outside.read_text() == "keep me" and not out.exists()


def test_the_sweep_learns_what_a_flag_writes_from_the_parser(tmp_path: Path) -> None:
    """A flag marked as writing on validate's parser is placed in the pair folder, with no
    list to update: the marks are the only source."""
    from parity.cli import build_parser
    from parity.path_flags import PathFlags, writes
    from parity.sweep.manifest import load_manifest
    from parity.sweep.plan import plan_jobs

    parser = build_parser()
    flags = PathFlags.of(parser)
    assert {"--json", "--html", "--save-run", "--save-reference"} <= set(flags.writes)
    assert {"--model-explorer", "--export-path"} <= set(flags.writes)
    assert {"--onnx", "--inputs", "--reference", "--weights", "--tolerances"} <= set(flags.reads)
    validate = next(
        a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)
    ).choices["validate"]
    writes(validate.add_argument("--new-output", metavar="FILE"))
    flags = PathFlags.of(parser)
    manifest = tmp_path / "manifest.json"
    pair = {"name": "a", "args": ["--model", "demo:cnn", "--new-output=x.bin"]}
    manifest.write_text(json.dumps({"schema": "parity.sweep/1", "pairs": [pair]}))
    (job,) = plan_jobs(load_manifest(manifest, flags=flags), tmp_path / "out", timeout=None)
    # the pair writes it in its private folder; the driver lands it in OUT/a/ (parity.sweep)
    assert ("--new-output", "x.bin") in {(o.flag, o.name) for o in job.outputs}
    assert (
        job.out_dir == str(tmp_path / "out" / "a")
        or Path(job.out_dir).resolve() == (tmp_path / "out" / "a").resolve()
    )
    pair["args"] = ["--model", "demo:cnn", "--new-output", "/tmp/x.bin"]
    manifest.write_text(json.dumps({"schema": "parity.sweep/1", "pairs": [pair]}))
    with pytest.raises(
        UsageError, match=r"--new-output /tmp/x.bin: give a plain name \(no folder\)"
    ):
        load_manifest(manifest, flags=flags)
