"""One exception tree: every exception type the package defines is a ParityError (so the CLI,
the API and the dashboard treat it as a run that could not be made, in one line) and is
public, exported by `parity`."""

from __future__ import annotations

import ast
import importlib
import inspect
import pickle
import pkgutil
from pathlib import Path

import pytest

import parity
from parity import ParityError

ROOT = Path(__file__).resolve().parents[1]


def package_exceptions() -> dict[str, type[BaseException]]:
    """{qualified name: class} of every exception class defined in a module of `parity`
    (every module imported; the dashboard, which needs Streamlit, is read apart below)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(parity.__path__, "parity."):
        if info.name.startswith("parity.dashboard") or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            # errors only: a BaseException that is not an Exception is control flow (the
            # launcher's stop signal, like KeyboardInterrupt), never raised to a caller
            if issubclass(obj, Exception) and obj.__module__ == module.__name__:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_exception_type_is_a_parity_error_and_exported():
    found = package_exceptions()
    assert "parity.errors.RunTimeout" in found  # the walk reached the package's modules
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, ParityError))
    assert outside == []
    hidden = sorted(name for name, cls in found.items() if cls.__name__ not in parity.__all__)
    assert hidden == []
    for name in parity.__all__:
        if isinstance(getattr(parity, name), type) and name.endswith(("Error", "Timeout")):
            assert issubclass(getattr(parity, name), ParityError), name


def test_the_dashboard_defines_no_exception_type_of_its_own():
    """pages/ (parity.dashboard) is read, not imported: any class it derives from an exception
    would sit outside the tree."""
    defined = []
    for path in sorted((ROOT / "pages").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception", "Timeout", "Interrupted")) for b in bases):
                    defined.append(f"{path.name}:{node.name}({', '.join(bases)})")
    assert defined == []


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (parity.FieldError("tolerances.atol: expected a finite number"), "usage"),
        (parity.ExpressionError("Symbol takes one name"), "model_load"),
        (parity.Interrupted("pair-3"), "interrupted"),
        (parity.BudgetError("needs 9 GiB"), "too_large"),
        (parity.RunTimeout("timed out after 5 s"), "timeout"),
    ],
)
def test_the_errors_that_joined_the_tree_keep_their_text_and_travel(error, kind):
    """Their one line is their text; FieldError and ExpressionError stay ValueErrors for the
    readers that catch them so; each survives pickling (a sweep's pairs run in processes)."""
    assert isinstance(error, ParityError)
    assert error.kind == kind
    assert str(error) == error.message == error.args[0]
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    if isinstance(error, (parity.FieldError, parity.ExpressionError)):
        assert isinstance(error, ValueError)


def test_a_malformed_json_field_is_one_parity_error():
    from parity.files import strict_json

    with pytest.raises(ParityError, match=r"where: expected an integer >= 0, got \"3\""):
        strict_json.integer("3", "where", minimum=0)
