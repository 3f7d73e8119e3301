"""The CLI as a new user meets it: help on every flag, a taken port named, bad settings
named, the benchmark's plot skipped without matplotlib."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import write_plot_if_possible
from windpipe.cli import _settings, build_parser, main
from windpipe.services.settings import Settings, setting_infos

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
        code = main(["serve", "flight", "--flight-port", "0", "--flight-metrics-port",
                     str(port), "--data-dir", str(tmp_path)])
        assert code == 2
        err = capsys.readouterr().err
        assert f"port {port}" in err
        assert "--flight-metrics-port" in err
        assert "WINDPIPE_FLIGHT_METRICS_PORT" in err


# every flag windpipe serve has had: none may go, whatever the settings say
SERVER_FLAGS = {
    "--host": "host", "--port": "port", "--flight-port": "flight_port",
    "--data-dir": "data_dir", "--database-url": "database_url", "--cache-bytes": "cache_bytes",
    "--cache-wait-s": "cache_wait_s", "--readahead-batches": "readahead_batches",
    "--endpoint-batches": "endpoint_batches", "--on-bad-segment": "on_bad_segment",
    "--ticket-ttl-s": "ticket_ttl_s", "--allow-root": "allowed_roots",
    "--insecure": "insecure", "--tier-dir": "tier_dir", "--tier-bytes": "tier_bytes",
    "--auto-blocks": "auto_blocks", "--build-ahead-bytes": "build_ahead_bytes",
    "--catalog-url": "catalog_url", "--flight-location": "flight_locations",
    "--root-scope": "root_scopes", "--sqlite-busy-timeout-s": "sqlite_busy_timeout_s",
    "--storage-workers": "storage_workers", "--storage-queue": "storage_queue",
    "--flight-discovery": "flight_discovery", "--flight-discovery-s": "flight_discovery_s",
    "--host-id": "host_id", "--pack-dir": "pack_dir", "--pack-rows": "pack_rows",
    "--flight-metrics-port": "flight_metrics_port",
}


def test_serve_help_lists_every_server_flag_with_its_settings_text_and_default():
    env = {**os.environ, "COLUMNS": "2000"}  # one line per help text
    out = subprocess.run([*WINDPIPE, "serve", "--help"], capture_output=True, text=True,
                         check=True, env=env).stdout
    options = out[out.index("options:"):]
    flagged = {info.flag: info for info in setting_infos() if info.flag}
    assert {flag: info.name for flag, info in flagged.items()} == SERVER_FLAGS
    for flag, info in flagged.items():
        entry = options[options.index("  " + flag):].split("\n  -", 1)[0]
        text = " ".join(entry.split())
        assert f"{info.description} (default {info.default})" in text, (flag, text)
    assert "--no-auto-blocks" in options
    assert "{raise,skip}" in options
    assert Settings.model_fields["cache_bytes"].default == 1 << 30
    assert "(default 1 GiB)" in options


def test_a_flag_beats_its_variable_which_beats_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
):
    parse = build_parser().parse_args
    assert _settings(parse(["serve"])).cache_wait_s == Settings().cache_wait_s
    monkeypatch.setenv("WINDPIPE_CACHE_WAIT_S", "7")
    monkeypatch.setenv("WINDPIPE_ALLOWED_ROOTS", "/env/a,/env/b")
    monkeypatch.setenv("WINDPIPE_INSECURE", "true")
    monkeypatch.setenv("WINDPIPE_AUTO_BLOCKS", "false")
    from_env = _settings(parse(["serve"]))
    assert (from_env.cache_wait_s, from_env.allowed_roots) == (7.0, ("/env/a", "/env/b"))
    assert (from_env.insecure, from_env.auto_blocks) == (True, False)
    given = _settings(parse(["serve", "--cache-wait-s", "5", "--allow-root", "/x",
                             "--allow-root", "s3://b/p", "--auto-blocks",
                             "--flight-location", "grpc://a:1", "--data-dir", str(tmp_path)]))
    assert (given.cache_wait_s, given.allowed_roots, given.auto_blocks) == (
        5.0, ("/x", "s3://b/p"), True)
    assert (given.flight_locations, given.data_dir) == (("grpc://a:1",), tmp_path)
    monkeypatch.delenv("WINDPIPE_INSECURE")
    assert _settings(parse(["serve", "--insecure"])).insecure is True
    assert _settings(parse(["serve"])).insecure is False
    migrate = parse(["migrate", "--database-url", "sqlite://", "--data-dir", str(tmp_path)])
    assert _settings(migrate).resolved_database_url() == "sqlite://"


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
