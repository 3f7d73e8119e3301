"""The lines of a discovery file (``windpipe.services.discovery``): each checked on its own, a bad
one logged with its line number and reason and skipped, the others kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from windpipe.services.discovery import (
    FileSource,
    FlightDiscovery,
    RejectedLine,
    check_location,
    parse_lines,
)

GOOD = ("grpc://10.0.0.1:8815", "grpc+tcp://flight-1.windpipe.svc:8815", "grpc://[::1]:1",
        "grpc://host_name:65535", "grpc://h:1/")


@pytest.mark.parametrize("location", GOOD)
def test_a_flight_location_is_kept_as_written(location: str) -> None:
    assert check_location(location) == location


@pytest.mark.parametrize(("line", "reason"), [
    ("grpc://127.0.0.1:99999", "Port out of range"),
    ("grpc://127.0.0.1:65536", "Port out of range"),
    ("grpc://h:0", "port 0 is outside 1-65535"),
    ("grpc://h:abc", "could not be cast to integer"),
    ("grpc://h", "no port"),
    ("grpc://:8815", "no host"),
    ("not a url", "holds spaces"),
    ("grpc://[::1", "Invalid IPv6 URL"),
    ("grpc://[not-v6]:1", "IPv6 address"),
    ("grpc://a..b:1", "not a host name"),
    ("grpc://h$:1", "not a host name"),
    ("http://h:1", "got http://"),
    ("file:///srv/servers.txt", "got file://"),
    ("grpc+tls://h:1", "got grpc+tls://"),
    ("h:8815", "got h://"),
    ("10.0.0.1", "no scheme"),
    ("grpc://user@h:1", "no user or password"),
    ("grpc://h:1/path", "without a path"),
    ("grpc://h:1?x=1", "without a path, query"),
])
def test_a_line_that_is_no_flight_location_says_why(line: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("+", r"\+")):
        check_location(line)


def test_bad_lines_are_skipped_with_their_number_and_the_rest_kept() -> None:
    text = ("# servers\n"
            "grpc://10.0.0.1:8815  # node a\n"
            "grpc://127.0.0.1:99999\n"
            "\n"
            "grpc://h:abc\n"
            "not a url\n"
            "grpc://[::1\n"
            "http://10.0.0.9:8815\n"
            "grpc://10.0.0.2:8815\n"
            "grpc://10.0.0.1:8815\n")
    listing = parse_lines(text)
    assert listing.locations == ("grpc://10.0.0.1:8815", "grpc://10.0.0.2:8815")
    assert [(r.number, r.text) for r in listing.rejected] == [
        (3, "grpc://127.0.0.1:99999"), (5, "grpc://h:abc"), (6, "not a url"),
        (7, "grpc://[::1"), (8, "http://10.0.0.9:8815")]
    assert listing.rejected[0] == RejectedLine(3, "grpc://127.0.0.1:99999",
                                               "not a URL: Port out of range 0-65535")
    assert all(r.reason for r in listing.rejected)


def test_a_file_of_only_bad_lines_names_no_location() -> None:
    assert parse_lines("grpc://h:0\nfoo\n").locations == ()
    assert parse_lines("").locations == ()


def test_the_file_source_logs_a_bad_line_once_and_keeps_the_rest(tmp_path: Path) -> None:
    listed = tmp_path / "servers.txt"
    listed.write_text("grpc://b:1\ngrpc://b:99999\ngrpc://c:1\n")
    source = FileSource(listed)
    with capture_logs() as logs:
        assert source.read() == ("grpc://b:1", "grpc://c:1")
        assert source.read() == ("grpc://b:1", "grpc://c:1")  # read again: not logged again
    skipped = [e for e in logs if e["event"] == "flight.discovery.line_skipped"]
    assert len(skipped) == 1
    assert skipped[0]["line"] == 2
    assert skipped[0]["text"] == "grpc://b:99999"
    assert "Port out of range" in skipped[0]["reason"]
    assert skipped[0]["log_level"] == "warning"
    assert source == FileSource(listed)  # what was logged is no part of its identity

    listed.write_text("grpc://b:1\n\nnope\n")
    with capture_logs() as logs:
        assert source.read() == ("grpc://b:1",)
    assert [(e["line"], e["text"]) for e in logs
            if e["event"] == "flight.discovery.line_skipped"] == [(3, "nope")]


def test_discovery_offers_only_the_valid_lines(tmp_path: Path) -> None:
    listed = tmp_path / "servers.txt"
    listed.write_text("grpc://b:1\ngrpc://h:abc\ngrpc://[::1\ngrpc+tcp://c:2\n")
    found = FlightDiscovery(("grpc://a:1",), FileSource(listed), interval_s=60.0)
    assert found.locations() == ("grpc://a:1", "grpc://b:1", "grpc+tcp://c:2")
