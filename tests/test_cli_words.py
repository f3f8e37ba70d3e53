"""Words of the command line a newcomer can act on (issue 37): a misspelled flag or command is
answered in one line with the one meant, exit 2."""

from __future__ import annotations

import pytest

from parity.cli import main


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["validate", "--model", "demo:cnn", "--input-set", "2"], "--input-sets"),
        (["validate", "--model", "demo:cnn", "--layer"], "--layers"),
        (["validate", "--model", "demo:cnn", "--noisefloor"], "--noise-floor"),
        (["validate", "--model", "demo:cnn", "--input-set=3"], "--input-sets"),
        (["dashboard", "--model", "demo:cnn", "--layer"], "--layers"),
        (["report", "r.parity.npz", "--jsn", "r.json"], "--json"),
    ],
)
def test_a_misspelled_flag_gets_one_line_naming_the_flag_meant(capsys, argv, meant):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and "usage:" not in err, err
    assert err.startswith(f"parity {argv[0]}: error: unrecognized arguments: ")
    assert err.rstrip().endswith(f"did you mean {meant}?")


def test_a_misspelled_command_gets_the_command_meant(capsys):
    with pytest.raises(SystemExit) as info:
        main(["valdate", "--model", "demo:cnn"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert err.startswith("parity: error: no command 'valdate': did you mean validate?")


def test_an_unknown_command_lists_the_commands_without_a_guess(capsys):
    with pytest.raises(SystemExit):
        main(["frobnicate"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "(commands: validate, report, demos, dashboard" in err


def test_a_bad_value_is_one_line_too(capsys):
    with pytest.raises(SystemExit) as info:
        main(["validate", "--model", "demo:cnn", "--input-sets", "two"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "parity validate: error: argument --input-sets: invalid int value: 'two'\n"
    )
