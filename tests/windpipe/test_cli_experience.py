"""The CLI as a new user meets it: help on every flag, a taken port named, bad settings
named, the benchmark's plot skipped without matplotlib."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import write_plot_if_possible
from windpipe.cli import build_parser, main

WINDPIPE = [sys.executable, "-m", "windpipe.cli"]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_every_flag_has_help_that_names_its_default():
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            assert action.help, f"windpipe {name} {action.option_strings[0]} has no help"
            assert "default" in action.help, (name, action.option_strings, action.help)
    bench = subprocess.run([*WINDPIPE, "bench", "--help"], capture_output=True, text=True,
                           check=True)
    options = bench.stdout[bench.stdout.index("options:"):]
    for flag in ("--quick", "--rows", "--out", "--json", "--only", "--max-seconds"):
        entry = options[options.index("  " + flag):].split("\n  --", 1)[0]
        assert "default" in entry, (flag, entry)


def test_synth_help_shows_the_numbers():
    out = subprocess.run([*WINDPIPE, "synth", "--help"], capture_output=True, text=True,
                         check=True)
    assert "(default 4)" in out.stdout
    assert "(default 600)" in out.stdout


def test_a_taken_port_is_named_with_the_flag_to_change_it(tmp_path: Path, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code = main(["serve", "catalog", "--port", str(port), "--data-dir", str(tmp_path)])
        assert code == 2
        err = capsys.readouterr().err
        assert f"port {port} on 127.0.0.1 is taken" in err
        assert "--port PORT" in err
        assert "WINDPIPE_PORT" in err
        code = main(["serve", "flight", "--flight-port", str(port), "--data-dir",
                     str(tmp_path)])
        assert code == 2
        err = capsys.readouterr().err
        assert f"port {port}" in err
        assert "--flight-port" in err


def test_a_bad_setting_names_the_flag_and_the_variable(tmp_path: Path, capsys):
    code = main(["serve", "--cache-bytes", "10", "--data-dir", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--cache-bytes / WINDPIPE_CACHE_BYTES" in err
    assert "Traceback" not in err


def test_the_bench_plot_is_skipped_with_a_message_without_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,
):
    record = {"contenders": {"a": {"tokens_per_s": 1e6}}, "date": "2026-01-01T00:00:00"}
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert write_plot_if_possible(record, tmp_path / "bench.png") is False
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert not (tmp_path / "bench.png").exists()


def test_the_bench_plot_is_written_with_matplotlib(tmp_path: Path):
    pytest.importorskip("matplotlib")
    record = {"contenders": {"windpipe_local": {"tokens_per_s": 1e6},
                             "memcpy_ceiling": {"tokens_per_s": 1e8}},
              "date": "2026-01-01T00:00:00"}
    assert write_plot_if_possible(record, tmp_path / "bench.png") is True
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
