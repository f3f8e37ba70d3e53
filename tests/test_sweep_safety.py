"""Sweep safety (issue 49) and faults on the local engine (issue 48), with real processes:
a validate killed by SIGKILL is named as killed; every parse of a manifest, a summary and a
pair's report is budgeted before it starts; a pair's files never land outside DIR/NAME and an
earlier run's files never outlive the new one; URIs are read by the pair itself."""

from __future__ import annotations

import json
import signal

import pytest

from parity.cli import main
from parity.errors import UsageError
from parity.files.json_budget import VALUE_BYTES, check_json_budget, parse_cost
from parity.sweep.delivery import read_uri
from parity.sweep.folder import load_sweep
from tests.helpers.sweep_zoo import GOOD, KILLER, copy_tiny, write_manifest


def test_a_validate_killed_by_sigkill_is_named_as_killed_on_the_local_engine(
    tmp_path, model_zoo, tiny_artifacts, capsys
):
    zoo = tmp_path / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    (zoo / "killer.py").write_text(KILLER)
    pairs = [{"name": "oom", "args": ["--model", "killer.py:make", "--onnx", "tiny.onnx"]}]
    manifest = write_manifest(zoo, pairs)
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out)]) == 2
    (pair,) = json.loads((out / "summary.json").read_text())["pairs"]
    assert pair["exit_code"] == -signal.SIGKILL
    assert pair["error"].startswith("crashed: killed by SIGKILL: out of memory?")
    (attempt,) = pair["attempts"]
    assert attempt["outcome"] == "error" and attempt["node"]
    report = json.loads((out / "oom" / "report.json").read_text())
    assert report["verdict"] == "error" and "SIGKILL" in json.dumps(report)
    assert "ERROR  oom: crashed: killed by SIGKILL: out of memory?" in capsys.readouterr().out


def test_a_pairs_earlier_files_are_replaced_and_nothing_is_written_outside_its_folder(
    tmp_path, model_zoo, tiny_artifacts
):
    zoo = tmp_path / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    out = tmp_path / "out"
    manifest = write_manifest(zoo, [{"name": "a", "args": [*GOOD, "--html", "old.html"]}])
    assert main(["sweep", str(manifest), "--out", str(out)]) == 0
    assert (out / "a" / "old.html").is_file()
    # the same pair now fails (other weights) and writes no HTML: the old report and HTML go
    failing = [*GOOD, "--weights", "other_weights.pt"]
    write_manifest(zoo, [{"name": "a", "args": failing}])
    assert main(["sweep", str(manifest), "--out", str(out)]) == 1
    assert sorted(p.name for p in (out / "a").iterdir()) == ["log.txt", "pair.json", "report.json"]
    assert json.loads((out / "a" / "report.json").read_text())["verdict"] == "fail"
    assert sorted(p.name for p in out.iterdir()) == ["a", "index.html", "summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "zoo"]  # nothing beside


def test_json_too_costly_to_parse_is_refused_in_one_line_before_parsing(tmp_path, capsys):
    values, cost = parse_cost(b'{"a": [1, 2, 3]}')
    assert values >= 5 and cost == values * VALUE_BYTES + 2 * 16
    check_json_budget(b"[1, 2]", "small.json")  # within the budget: nothing said
    with pytest.raises(UsageError, match=r"^big.json: too big to read: up to 3 JSON values"):
        check_json_budget(b"[1, 2]", "big.json", budget=100)

    # a manifest of 3 million tiny values (6 MB): refused, not parsed (it would take ~250 MB)
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"schema": "parity.sweep/1", "pairs": [' + "[]," * 3_000_000 + "[]]}")
    assert main(["sweep", str(manifest), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "too big to read" in err and "manifest" in err, err

    # a sweep folder whose summary.json is the same: the Sweep page's reader says so in a line
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "summary.json").write_text('{"pairs": [' + "{}," * 3_000_000 + "{}]}")
    with pytest.raises(UsageError, match="sweep summary .*summary.json: too big to read"):
        load_sweep(folder)


def test_a_uri_is_read_by_the_pair_file_without_extras_others_name_what_to_install(tmp_path):
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"bytes")
    assert read_uri(onnx_file.as_uri()) == b"bytes"
    with pytest.raises(UsageError, match="no such file"):
        read_uri((tmp_path / "gone.onnx").as_uri())
    with pytest.raises(UsageError, match=r"file:///PATH"):
        read_uri("file://otherhost/m.onnx")
    pytest.importorskip("fsspec")
    for uri, package in (("s3://bucket/m.onnx", "s3fs"), ("gs://bucket/m.onnx", "gcsfs")):
        try:
            __import__(package)
        except ImportError:
            with pytest.raises(UsageError) as info:
                read_uri(uri)
            assert f"pip install fsspec {package}" in info.value.message
            assert "\n" not in info.value.message


def test_a_pinned_uri_that_differs_fails_its_pair_in_one_line(tmp_path, model_zoo, tiny_artifacts):
    zoo = tmp_path / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    uri = (zoo / "tiny.onnx").as_uri()
    pairs = [{"name": "a", "args": ["--model", "models.py:make_tiny", "--onnx", uri]}]
    manifest = write_manifest(zoo, pairs)
    data = json.loads(manifest.read_text())
    data["sha256"] = {uri: "0" * 64}
    manifest.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert main(["sweep", str(manifest), "--out", str(out)]) == 2
    (pair,) = json.loads((out / "summary.json").read_text())["pairs"]
    assert pair["error"].startswith(f"{uri}: its SHA-256 is ")
    assert pair["error"].endswith(f"the manifest pins {'0' * 64}")


def test_every_file_a_pair_needs_is_bundled_once_by_content_at_its_relative_place(
    tmp_path, model_zoo, tiny_artifacts
):
    import onnx

    from parity.cli import build_parser
    from parity.path_flags import PathFlags
    from parity.sweep.delivery import OUTSIDE, Shipper, unpack
    from parity.sweep.manifest import load_manifest
    from parity.sweep.plan import plan_jobs

    zoo = tmp_path / "zoo"
    copy_tiny(zoo, model_zoo, tiny_artifacts)
    (zoo / "pkg").mkdir()
    (zoo / "pkg" / "__init__.py").write_text("")
    (zoo / "pkg" / "layers.py").write_text("X = 1\n")
    ext = zoo / "ext"
    ext.mkdir()
    onnx.save_model(
        onnx.load(str(tiny_artifacts.onnx)), str(ext / "m.onnx"), save_as_external_data=True,
        location="m.data", size_threshold=0,
    )  # fmt: skip
    hf = zoo / "hfdir"
    (hf / "sub").mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    (hf / "sub" / "w.bin").write_bytes(b"w")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "tol.json").write_text('{"default": {"atol": 1e-4}}')
    tiny = ["--model", "models.py:make_tiny"]
    pairs = [
        {"name": "a",
         "args": [*tiny, "--onnx", "ext/m.onnx", "--tolerances", "../elsewhere/tol.json"]},
        {"name": "b", "args": ["--model", "hf:hfdir", "--onnx", "tiny.onnx"]},
    ]  # fmt: skip
    manifest = write_manifest(zoo, pairs)
    a, b = plan_jobs(load_manifest(manifest, flags=PathFlags.of(build_parser())), tmp_path / "o",
                     timeout=None)  # fmt: skip
    puts: list[bytes] = []
    shipper = Shipper(lambda data: (puts.append(data), len(puts) - 1)[1])
    bundle_a, bundle_b = shipper.bundle(a), shipper.bundle(b)
    rels = {f.rel for f in bundle_a.files}
    assert {"models.py", "ext/m.onnx", "ext/m.data", "pkg/layers.py", "pkg/__init__.py"} <= rels
    assert "other_weights.pt" in rels and "tiny.onnx" not in rels  # beside it; ONNX files not
    (tol,) = [r for r in rels if r.endswith("tol.json")]
    assert tol.startswith(f"{OUTSIDE}/") and ".." not in tol
    assert {"hfdir/config.json", "hfdir/sub/w.bin", "tiny.onnx"} <= {f.rel for f in bundle_b.files}
    assert len(puts) == len({*puts}) == shipper.files_put  # each content put once

    work = tmp_path / "work"
    moved = unpack(bundle_a, work, lambda ref: puts[ref])
    args = a.command_args(tmp_path / "out", moved)
    assert args[args.index("--onnx") + 1] == "ext/m.onnx" and (work / "ext" / "m.data").is_file()
    assert args[args.index("--tolerances") + 1] == tol and (work / tol).is_file()
    moved_b = unpack(bundle_b, tmp_path / "work_b", lambda ref: puts[ref])
    args_b = b.command_args(tmp_path / "out", moved_b)
    assert args_b[args_b.index("--model") + 1] == "hf:hfdir"
    assert (tmp_path / "work_b" / "hfdir" / "sub" / "w.bin").read_bytes() == b"w"
