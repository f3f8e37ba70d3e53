"""ONNX Runtime GenAI's model builder, in a test environment of its own.

onnxruntime-genai 0.18's builder imports transformers >= 5, while Optimum (Parity's `hf`
extra) wants transformers < 5: the builder runs in a venv made here once and cached
(`PARITY_GENAI_VENV`, default ~/.cache/parity-tests/genai-0.18.0). The venv holds only
transformers 5 and onnxruntime-genai (and what they pull that the main environment lacks
or pins lower); a `.pth` file appends the main environment's site-packages after its own,
so torch, numpy and onnxruntime come from there, never reinstalled, and the main
environment's transformers and torch are never touched.
"""

from __future__ import annotations

import fcntl
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

GENAI = "onnxruntime-genai==0.18.0"
TRANSFORMERS = "transformers>=5,<6"


def venv_dir() -> Path:
    given = os.environ.get("PARITY_GENAI_VENV")
    return Path(given) if given else Path.home() / ".cache" / "parity-tests" / "genai-0.18.0"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def genai_python() -> tuple[Path | None, str]:
    """(the venv's python, "") once it is made, or (None, why it could not be)."""
    root = venv_dir()
    python = root / "bin" / "python"
    ready = root / ".parity-ready"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time (xdist workers)
        if ready.exists():
            return python, ""
        made = subprocess.run(
            [sys.executable, "-m", "venv", "--clear", str(root)],
            capture_output=True,
            text=True,
            env=_clean_env(),
        )
        if made.returncode != 0:
            return None, f"python -m venv failed: {made.stderr.strip()[-300:]}"
        ours = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            env=_clean_env(),
        ).stdout.strip()
        main_paths = dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()])
        Path(ours, "zz_parity_main_env.pth").write_text("\n".join(main_paths) + "\n")
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", TRANSFORMERS, GENAI],
            capture_output=True,
            text=True,
            env=_clean_env(),
        )
        if pip.returncode != 0:
            return None, f"pip install {GENAI} failed: {pip.stderr.strip()[-300:]}"
        ready.write_text(GENAI + "\n")
        return python, ""


def build(python: Path, model_dir: str, out: Path, precision: str, cache: Path) -> Path:
    """`python -m onnxruntime_genai.models.builder -i DIR -o OUT -p fp32|int4 -e cpu`;
    returns OUT/model.onnx (AssertionError with the builder's last lines if it fails)."""
    done = subprocess.run(
        [str(python), "-m", "onnxruntime_genai.models.builder", "-i", model_dir, "-o",
         str(out), "-p", precision, "-e", "cpu", "-c", str(cache)],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return out / "model.onnx"
