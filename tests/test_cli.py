"""The ``liptable`` command refuses bad arguments at once, with one clear line, before any
work: a file or unwritable folder as ``--out``, unknown module names, a negative ``--n``,
unknown envelope modules. Its choices come from the catalog."""

from __future__ import annotations

import json
import os
import time

import pytest

from derive import cli
from derive.catalog import SECTIONS, envelope_keys


def _refused(capsys, argv: list[str]) -> str:
    """The error text of a call that must be refused with exit status 2, quickly."""
    start = time.perf_counter()
    with pytest.raises(SystemExit) as stop:
        code = cli.main(argv)
        raise SystemExit(code)
    assert stop.value.code == 2
    assert time.perf_counter() - start < 5, "refused only after doing the work"
    return capsys.readouterr().err


def test_report_out_is_a_file(tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("")
    err = _refused(capsys, ["report", "--out", str(target), "--modules", "relu"])
    assert "--out" in err and "not a folder" in err


def test_report_out_below_a_file(tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("")
    err = _refused(capsys, ["report", "--out", str(target / "sub"), "--modules", "relu"])
    assert "not a folder" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_report_out_not_writable(tmp_path, capsys):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    err = _refused(capsys, ["report", "--out", str(folder / "report"), "--modules", "relu"])
    assert "not writable" in err


def test_report_unknown_module(capsys):
    err = _refused(capsys, ["report", "--modules", "nosuch"])
    assert "nosuch" in err and "layernorm" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("n", ["-5", "0", "ten"])
def test_bench_passes_must_be_a_positive_whole_number(capsys, n):
    err = _refused(capsys, ["bench", "--passes", n])
    assert "--passes" in err and "Traceback" not in err


def test_bench_unknown_module(capsys):
    err = _refused(capsys, ["bench", "relu", "nosuch"])
    assert "nosuch" in err and "layernorm" in err and "Traceback" not in err


def test_envelope_unknown_module(capsys):
    err = _refused(capsys, ["envelope", "nosuch"])
    assert "nosuch" in err and "layernorm" in err


@pytest.mark.parametrize(
    ("command", "names"), [("report", SECTIONS), ("envelope", envelope_keys())]
)
def test_choices_come_from_the_catalog(capsys, command, names):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in names:
        assert name in text, name


def test_tau_max_reaches_the_envelope(capsys):
    """``--tau-max`` used to be dropped by the command's own list of option names. (At 0.5
    the branch and bound takes about a second; at 4 it took about ten.)"""
    answers = {}
    for tau in ("0.5", "1"):
        assert cli.main(["envelope", "scs_attention", "--tau-max", tau, "--json"]) == 0
        answers[tau] = json.loads(capsys.readouterr().out)
    assert answers["0.5"]["config"]["tau_max"] == 0.5
    assert answers["0.5"]["safe_upstream_gradient"] > answers["1"]["safe_upstream_gradient"]


def test_envelope_check_of_a_witness_too_large_to_build(capsys):
    """The envelope of a huge row is answered; ``--check`` cannot run a kernel on a witness
    that was not built, and says so in one line instead of a traceback."""
    assert cli.main(["envelope", "layernorm", "--dim", "1000000000", "--check"]) == 2
    captured = capsys.readouterr()
    assert "safe upstream gradient" in captured.out
    assert captured.err.startswith("liptable envelope: --check:")
    assert "not built" in captured.err
