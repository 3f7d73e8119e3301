"""``windpipe ingest``: cycler exports read by the field's libraries (battery-data-toolkit,
galvani) into normalized segments and a manifest; bad files named by file, row and column.
The exports are written in the vendors' layouts (tests/fixtures/cyclers.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.fixtures.cyclers import arbin_file, batterydata_file, biologic_mpr, maccor_file
from windpipe.cli import main
from windpipe.services.ingest import PATTERN, IngestError, detect_cycler, ingest_exports

WRITERS = {
    "maccor": lambda d: maccor_file(d / "cellA.001"),
    "arbin": lambda d: arbin_file(d / "cellA.csv"),
    "batterydata": lambda d: batterydata_file(d / "cellA-raw.csv"),
    "biologic": lambda d: biologic_mpr(d / "cellA.mpr", cycles=3),
}


@pytest.mark.parametrize("cycler", sorted(WRITERS))
def test_an_export_becomes_one_segment_per_cycle_in_standard_units(tmp_path: Path,
                                                                   cycler: str) -> None:
    src = tmp_path / "exports"
    src.mkdir()
    export = WRITERS[cycler](src)
    assert detect_cycler(export) == cycler
    result = ingest_exports([src], tmp_path / "lab", protocol="cycling")
    manifest = pl.read_parquet(result.manifest_path)
    cycling = manifest.filter(pl.col("protocol") == "cycling")
    assert cycling.get_column("cidx").to_list() == [0, 1, 2]
    assert set(manifest.get_column("set_id")) == {"lab"}
    assert set(manifest.get_column("cell_id")) == {"cellA"}
    assert set(manifest.get_column("cycler")) == {cycler}
    assert set(manifest.get_column("source_files")) == {export.name}
    seg = pl.read_parquet(result.path / cycling.get_column("segment_path")[1])
    assert seg.height == cycling.get_column("row_count")[1]
    assert seg.schema["time_s"] == pl.Float64
    assert seg.schema["current_a"] == seg.schema["voltage_v"] == pl.Float32
    assert seg.get_column("time_s")[0] == 0.0
    assert bool((seg.get_column("dt_s").to_numpy()[1:] > 0).all())
    current = seg.get_column("current_a").to_numpy()
    assert current.max() > 0.9  # A, positive on charge
    assert current.min() < -0.9
    # charging raises the voltage: the sign convention survived the reader
    volts = seg.get_column("voltage_v").to_numpy()
    assert volts[np.argmax(current > 0) + 5] > volts[0]
    assert 3.3 < float(np.nanmean(volts)) < 4.2
    if cycler != "maccor":  # MACCOR's ASCII layout has no temperature column
        assert 24.0 < float(seg.get_column("temperature_c").mean()) < 28.0
    info = json.loads((result.path / "ingest.json").read_text())
    assert info["pattern"] == PATTERN
    assert cycler in info["readers"]


def test_spectra_become_eis_segments(tmp_path: Path) -> None:
    src = tmp_path / "exports"
    src.mkdir()
    batterydata_file(src / "p1-raw.csv", cycles=2, eis_points=12)
    biologic_mpr(src / "p2_PEIS.mpr", cycles=2, rows_per_cycle=15, spectrum=True)
    result = ingest_exports([src], tmp_path / "out")
    eis = pl.read_parquet(result.manifest_path).filter(pl.col("protocol") == "eis")
    assert eis.select("cell_id", "cidx", "row_count").rows() == [
        ("p1", 1, 12), ("p2_PEIS", 0, 15), ("p2_PEIS", 1, 15)]
    seg = pl.read_parquet(result.path / eis.get_column("segment_path")[1])
    assert seg.columns == ["freq_hz", "z_real_ohm", "z_imag_ohm"]
    assert float(seg.get_column("z_imag_ohm").max()) <= 0.0  # Im(Z): negative (capacitive)


def test_maccor_continuation_files_are_one_test(tmp_path: Path) -> None:
    maccor_file(tmp_path / "cellB.001", cycles=2)
    maccor_file(tmp_path / "cellB.002", cycles=2)
    result = ingest_exports([tmp_path / "cellB.001", tmp_path / "cellB.002"], tmp_path / "o")
    manifest = pl.read_parquet(result.manifest_path)
    assert manifest.get_column("cidx").to_list() == [0, 1, 2, 3]
    assert set(manifest.get_column("source_files")) == {"cellB.001, cellB.002"}


def test_a_cell_pattern_joins_a_cells_files(tmp_path: Path) -> None:
    biologic_mpr(tmp_path / "cellC_01_GCPL_C01.mpr", cycles=2)
    biologic_mpr(tmp_path / "cellC_02_PEIS_C01.mpr", cycles=2, spectrum=True)
    result = ingest_exports([tmp_path], tmp_path / "o", cell_pattern=r"^(?P<cell>[^_]+)_")
    manifest = pl.read_parquet(result.manifest_path)
    assert manifest.select("cell_id", "cidx", "protocol").rows() == [
        ("cellC", 0, "cycling"), ("cellC", 0, "eis"), ("cellC", 1, "cycling"),
        ("cellC", 1, "eis")]


def test_numbered_technique_files_of_a_cell_continue_its_cycles(tmp_path: Path) -> None:
    # EC-Lab restarts the cycle count in every technique file: 01 and 03 both hold cycle 0
    biologic_mpr(tmp_path / "cellC_03_GCPL_C01.mpr", cycles=2)
    biologic_mpr(tmp_path / "cellC_01_GCPL_C01.mpr", cycles=3)
    biologic_mpr(tmp_path / "cellC_02_PEIS_C01.mpr", cycles=2, spectrum=True)
    result = ingest_exports([tmp_path], tmp_path / "o", cell_pattern=r"^(?P<cell>[^_]+)_")
    manifest = pl.read_parquet(result.manifest_path)
    cycling = manifest.filter(pl.col("protocol") == "cycling")
    assert cycling.select("cidx", "source_files").rows() == [
        (0, "cellC_01_GCPL_C01.mpr"), (1, "cellC_01_GCPL_C01.mpr"),
        (2, "cellC_01_GCPL_C01.mpr"), (3, "cellC_03_GCPL_C01.mpr"),
        (4, "cellC_03_GCPL_C01.mpr")]
    assert manifest.filter(pl.col("protocol") == "eis").get_column("cidx").to_list() == [0, 1]
    # files that carry no technique number still may not claim one cycle twice
    biologic_mpr(tmp_path / "cellC_extra.mpr", cycles=2)
    with pytest.raises(IngestError, match=re.escape(
            "cellC_extra.mpr: cell 'cellC' has cycling cycle 0 in cellC_01_GCPL_C01.mpr too")):
        ingest_exports([tmp_path], tmp_path / "o2", cell_pattern=r"^(?P<cell>[^_]+)_")


def test_a_biologic_file_without_a_current_is_open_circuit_unless_named_otherwise(
        tmp_path: Path) -> None:
    biologic_mpr(tmp_path / "cellK.mpr", drop=("<I>/mA",))
    result = ingest_exports([tmp_path / "cellK.mpr"], tmp_path / "o")
    manifest = pl.read_parquet(result.manifest_path)
    assert set(manifest.get_column("protocol")) == {"ocv"}
    seg = pl.read_parquet(result.path / manifest.get_column("segment_path")[0])
    assert set(seg.get_column("current_a").to_list()) == {0.0}
    biologic_mpr(tmp_path / "cellK_03_GCPL_C01.mpr", drop=("<I>/mA",))
    with pytest.raises(IngestError, match=re.escape(
            "cellK_03_GCPL_C01.mpr: a GCPL file without a current: no I/mA, charge")):
        ingest_exports([tmp_path / "cellK_03_GCPL_C01.mpr"], tmp_path / "o2")


@pytest.mark.parametrize(("bad", "says"), [
    ((5, "Volts", "abc"), "cellD.001, data row 5, column 'Volts': 'abc' is not a number"),
    ((7, "Cyc#", "1.5"), "cellD.001, data row 7, column 'Cyc#': '1.5' is not an integer"),
    ((9, "Test (Min)", ""), "cellD.001, data row 9, column 'Test (Min)': is empty"),
])
def test_a_bad_value_is_named_by_file_row_and_column(tmp_path: Path,
                                                     bad: tuple[int, str, str], says: str) -> None:
    maccor_file(tmp_path / "cellD.001", bad=bad)
    with pytest.raises(IngestError) as exc:
        ingest_exports([tmp_path / "cellD.001"], tmp_path / "out")
    assert says in str(exc.value)
    assert (exc.value.row, exc.value.column) == (bad[0], bad[1])
    assert not (tmp_path / "out" / "manifest.parquet").exists()


def test_a_missing_column_and_a_broken_binary_file_are_named(tmp_path: Path) -> None:
    arbin_file(tmp_path / "cellE.csv", drop_column="Voltage")
    with pytest.raises(IngestError, match=re.escape(
            "cellE.csv: lacks the columns ['Voltage'] that the Arbin CSV reader needs")):
        ingest_exports([tmp_path / "cellE.csv"], tmp_path / "out", cycler="arbin")
    biologic_mpr(tmp_path / "cellF.mpr", magic=b"not an EC-Lab file".ljust(52))
    with pytest.raises(IngestError, match=re.escape(
            "cellF.mpr: galvani could not read it: ValueError: Invalid magic")):
        ingest_exports([tmp_path / "cellF.mpr"], tmp_path / "out")
    good = biologic_mpr(tmp_path / "cellG.mpr").read_bytes()
    (tmp_path / "cellG.mpr").write_bytes(good[:-9])
    with pytest.raises(IngestError, match=re.escape(
            "cellG.mpr: galvani could not read it: OSError: Unexpected end of file")):
        ingest_exports([tmp_path / "cellG.mpr"], tmp_path / "out")


def test_the_output_folder_changes_only_when_everything_was_read(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    maccor_file(src / "a.001")
    out = tmp_path / "out"
    first = ingest_exports([src], out)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(IngestError, match="not empty"):
        ingest_exports([src], out)
    maccor_file(src / "b.001", bad=(3, "Amps", "x"))
    with pytest.raises(IngestError, match=re.escape("b.001, data row 3")):
        ingest_exports([src], out, overwrite=True)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    (src / "b.001").unlink()
    maccor_file(src / "c.001", cycles=1)
    again = ingest_exports([src], out, overwrite=True)
    assert (first.n_cells, again.n_cells) == (1, 2)
    assert sorted(pl.read_parquet(again.manifest_path).get_column("cell_id").unique()) == [
        "a", "c"]


def test_inputs_no_reader_takes(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(IngestError, match="holds no cycler export"):
        ingest_exports([tmp_path], tmp_path / "out")  # folders: unknown files skipped
    with pytest.raises(IngestError, match=re.escape("other.csv: no reader recognizes")):
        ingest_exports([tmp_path / "other.csv"], tmp_path / "out")


def test_skipping_bad_files_writes_the_rest_and_says_why(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    maccor_file(src / "good.001", cycles=2)
    maccor_file(src / "test.001", cycles=2)
    maccor_file(src / "test.002", cycles=2, bad=(4, "Volts", "x"))
    biologic_mpr(src / "cellF.mpr", magic=b"not an EC-Lab file".ljust(52))
    with pytest.raises(IngestError, match=re.escape("cellF.mpr: galvani could not read it")):
        ingest_exports([src], tmp_path / "stop")  # the first bad file stops the run
    assert not (tmp_path / "stop" / "manifest.parquet").exists()
    result = ingest_exports([src], tmp_path / "out", on_bad_file="skip")
    manifest = pl.read_parquet(result.manifest_path)
    assert sorted(set(manifest.get_column("cell_id"))) == ["good"]
    assert sorted(p.name for p in (result.path / "segments" / "out").iterdir()) == ["good"]
    said = {Path(s.file).name: s.reason for s in result.skipped}
    assert said == {
        "cellF.mpr": "galvani could not read it: ValueError: Invalid magic for .mpr file: "
                     "b'not an EC-Lab file '",
        "test.002": "data row 4, column 'Volts': 'x' is not a number",
        "test.001": "read with test.002 as one test, which was refused",  # one test: whole
    }
    info = json.loads((result.path / "ingest.json").read_text())
    assert info["on_bad_file"] == "skip"
    assert {Path(s["file"]).name: s["reason"] for s in info["skipped"]} == said
    assert [Path(f).name for f in info["files"]] == ["good.001"]


def test_a_skipped_file_leaves_no_segment_behind(tmp_path: Path) -> None:
    # cellZ_b's cycle 0 is new, its cycle 1 is cellZ_a's: none of cellZ_b may be stored
    biologic_mpr(tmp_path / "cellZ_a.mpr", cycles=2, first_cycle=1)
    biologic_mpr(tmp_path / "cellZ_b.mpr", cycles=2)
    result = ingest_exports([tmp_path], tmp_path / "out", cell_pattern=r"^(?P<cell>[^_]+)_",
                            on_bad_file="skip")
    manifest = pl.read_parquet(result.manifest_path)
    assert manifest.select("cidx", "source_files").rows() == [
        (1, "cellZ_a.mpr"), (2, "cellZ_a.mpr")]
    stored = sorted(p.name for p in (result.path / "segments").rglob("*.parquet"))
    assert stored == ["cycle_00001.parquet", "cycle_00002.parquet"]
    assert [(Path(s.file).name, s.reason) for s in result.skipped] == [
        ("cellZ_b.mpr", "cell 'cellZ' has cycling cycle 1 in cellZ_a.mpr too; give the files "
                        "of one cell one test, or separate cells")]


def test_skipping_everything_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    biologic_mpr(tmp_path / "cellF.mpr", magic=b"not an EC-Lab file".ljust(52))
    with pytest.raises(IngestError, match=r"no file could be ingested: .*other\.csv: no reader "
                                          r"recognizes this file.*cellF\.mpr: galvani could not"):
        ingest_exports([tmp_path / "other.csv", tmp_path / "cellF.mpr"], tmp_path / "out",
                       on_bad_file="skip")
    assert not (tmp_path / "out" / "manifest.parquet").exists()


def test_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    maccor_file(tmp_path / "cellH.001")
    out = tmp_path / "lab"
    assert main(["ingest", str(tmp_path / "cellH.001"), "--out", str(out), "--set-id", "s1"]) == 0
    said = capsys.readouterr().out
    assert "wrote 180 rows of 1 cells in 3 segments" in said
    assert "manifest='manifest.parquet'" in said
    assert set(pl.read_parquet(out / "manifest.parquet").get_column("set_id")) == {"s1"}
    maccor_file(tmp_path / "cellI.001", bad=(2, "Volts", "?"))
    assert main(["ingest", str(tmp_path / "cellI.001"), "--out", str(tmp_path / "x")]) == 1
    assert "cellI.001, data row 2, column 'Volts'" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path), "--out", str(tmp_path / "y"),
                 "--on-bad-file", "skip"]) == 0
    said = capsys.readouterr().out
    assert "wrote 180 rows of 1 cells in 3 segments" in said
    assert f"skipped 1 files (listed in ingest.json):\n  {tmp_path / 'cellI.001'}: data row 2, " \
           "column 'Volts': '?' is not a number" in said
