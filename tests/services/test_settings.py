"""The settings are written once, in ``windpipe/services/settings.py``: the README's table, the
settings the docs name and their defaults in docs/operations.md agree with the fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from windpipe.services.settings import Settings, setting_infos, settings_table

ROOT = Path(__file__).resolve().parents[2]
# variables the docs name that are not server settings, and who reads them
OTHER_VARIABLES = {
    "WINDPIPE_FLIGHT_LOCATION_MAP",  # the SDK (windpipe/sdk/_locations.py)
    "WINDPIPE_URL",  # the SDK's catalog when Catalog() names none (windpipe/sdk/_state.py)
    "WINDPIPE_TOKEN",  # the SDK's bearer token when Catalog() names none (windpipe/sdk/_state.py)
    "WINDPIPE_BENCH_PG_ADMIN_URL",  # the benchmarks (bench/)
    "WINDPIPE_OTEL",  # traces, in every process, SDK included (windpipe/services/tracing.py)
}
_UNITS = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "s": 1}


def _readme_table() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Configuration"):text.index("## Deployment")]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| setting |"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return "\n".join(rows)


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def test_the_readme_table_is_the_settings_fields():
    """Row by row: variable, flag, default and text, as ``settings_table()`` writes
    them (paste its output into the README when a field changes)."""
    got, want = _readme_table().splitlines(), settings_table().splitlines()
    assert [_cells(r)[:3] for r in got] == [_cells(r)[:3] for r in want], settings_table()
    assert got == want, settings_table()
    named = {_cells(r)[0].strip("`") for r in got[2:]}
    fields = {info.variable for info in setting_infos()}
    limits = sorted(v for v in fields if v.startswith("WINDPIPE_MAX_"))
    assert sorted(fields - named) == limits  # in docs/operations.md instead


def test_the_table_shows_the_real_defaults():
    rows = {_cells(r)[0].strip("`"): _cells(r) for r in settings_table().splitlines()[2:]}
    assert rows["WINDPIPE_CACHE_BYTES"][1:3] == ["`--cache-bytes`", "1 GiB"]
    assert rows["WINDPIPE_TICKET_TTL_S"][2] == f"{int(Settings().ticket_ttl_s)} s"
    assert rows["WINDPIPE_ALLOWED_ROOTS"][1] == "`--allow-root` (repeat)"
    assert rows["WINDPIPE_AUTO_BLOCKS"][1:3] == ["`--[no-]auto-blocks`", "on"]
    assert rows["WINDPIPE_INSECURE"][1:3] == ["`--insecure`", "off"]
    assert rows["WINDPIPE_AUTH_CACHE_S"][1:3] == ["", "30 s"]
    assert rows["WINDPIPE_PORT"][2] == str(Settings.model_fields["port"].default)


def test_every_setting_has_a_description():
    assert [i.name for i in setting_infos() if not i.description] == []
    assert [i.name for i in setting_infos() if "|" in i.description + i.default] == []


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))],
                         ids=lambda p: p.name)
def test_every_variable_the_docs_name_is_a_setting(page: Path):
    fields = {info.variable for info in setting_infos()} | OTHER_VARIABLES
    named = set(re.findall(r"WINDPIPE_[A-Z0-9_]*[A-Z0-9]\b", page.read_text()))
    assert sorted(named - fields) == []


def _number(text: str) -> float:
    m = re.fullmatch(r"([\d,.]+)\s*([A-Za-z]*)", text.strip())
    assert m, text
    return float(m.group(1).replace(",", "")) * _UNITS.get(m.group(2), 1)


def test_operations_defaults_are_the_settings_defaults():
    """Each row of docs/operations.md that names a setting shows its default."""
    checked = set()
    for line in (ROOT / "docs" / "operations.md").read_text().splitlines():
        cells = _cells(line) if line.startswith("| `WINDPIPE_") else []
        if not cells:
            continue
        name = cells[0].strip("`").removeprefix("WINDPIPE_").lower()
        assert name in Settings.model_fields, cells[0]
        default = Settings.model_fields[name].default
        if default is None:  # resolved at start (the tier's budget: auto)
            assert cells[1].startswith("auto"), line
        else:
            assert _number(cells[1]) == default, line
        checked.add(name)
    limits = {name for name in Settings.model_fields if name.startswith("max_")}
    assert limits <= checked, sorted(limits - checked)


def test_a_keyword_that_names_no_setting_is_refused():
    """The environment may hold other programs' WINDPIPE_ variables (the SDK's
    WINDPIPE_TOKEN); a keyword in code is a field name or a typo, never ignored."""
    with pytest.raises(TypeError, match="'token'"):
        Settings(token="x")
    assert Settings(admin_token="y").admin_token_text() == "y"
