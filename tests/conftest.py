"""Shared fixtures: each lives in ``tests/fixtures/<topic>.py`` and is registered here."""

pytest_plugins = [
    "tests.fixtures.data",
    "tests.fixtures.s3",
    "tests.fixtures.database",
    "tests.fixtures.servers",
    "tests.fixtures.observed",
]
