"""validate()'s keywords as a type checker reads them (issue 62, typed joints).

`validate(**options: Unpack[ValidateOptions])`: mypy, run here on a small script, names a
misspelt keyword and a value of the wrong type, and passes a right call. The check reads
parity.api alone (every other module it imports is skipped: Any), so it takes seconds.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from mypy import api as mypy_api

import parity.api

SCRIPT = textwrap.dedent(
    """\
    from parity.api import assert_export_close, validate

    validate(None, input_set=2)
    assert_export_close(None, seed="0")
    validate(None, input_sets=2, seed=1, atol=1e-4, judge="cause")
    """
)
CONFIG = """\
[mypy]
python_version = 3.11
ignore_missing_imports = true
follow_imports = skip
[mypy-parity.api]
follow_imports = normal
"""


def test_mypy_names_a_wrong_keyword_and_a_wrong_type_given_to_validate(tmp_path):
    # the package's folder is core/, imported as parity: mypy finds it as parity here
    package = tmp_path / "parity"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "api.py").symlink_to(Path(parity.api.__file__))
    (tmp_path / "script.py").write_text(SCRIPT)
    (tmp_path / "mypy.ini").write_text(CONFIG)
    out, err, status = mypy_api.run(
        [
            "--config-file", str(tmp_path / "mypy.ini"),
            "--cache-dir", str(tmp_path / "cache"),
            "--no-error-summary",
            str(tmp_path / "script.py"),
        ]
    )  # fmt: skip
    assert not err, err
    errors = re.findall(r"script\.py:(\d+): error: (.*)", out)
    assert [line for line, _ in errors] == ["3", "4"], out
    assert 'Unexpected keyword argument "input_set" for "validate"' in errors[0][1]
    assert 'Argument "seed" to "assert_export_close" has incompatible type "str"' in errors[1][1]
    assert status == 1
