"""docs/notebooks/quickstart.ipynb runs top to bottom in a real Jupyter kernel (nbclient)
against real servers on port 0, and its outputs are what a user should see."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.servers import embedded_services
from windpipe.services.synth import write_synthetic_dataset

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "quickstart.ipynb"


def _by_tag(nb: Any) -> dict[str, Any]:
    return {tag: cell for cell in nb.cells if cell.cell_type == "code"
            for tag in cell.metadata.get("tags", [])}


def _text(cell: Any) -> str:
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


@pytest.mark.slow
def test_the_quickstart_notebook_runs_and_shows_its_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    data = write_synthetic_dataset(tmp_path / "demo-data", rows_per_cycle=2000, seed=0)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "commit the notebook without outputs"
    with embedded_services(tmp_path / ".windpipe") as url:
        monkeypatch.setenv("WINDPIPE_URL", url)
        monkeypatch.setenv("WINDPIPE_DEMO_DATA", str(data.path))
        monkeypatch.delenv("MPLBACKEND", raising=False)
        client = nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3",
            resources={"metadata": {"path": str(tmp_path)}},
        )
        client.execute()
    cells = _by_tag(nb)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", out
            if out.output_type == "stream" and cell is not cells["register"]:
                assert out.name != "stderr" or "Warning" not in out.text, out.text
    assert url in cells["catalog"].outputs[0].data["text/html"]
    # the demo data's nulls are said (a DataWarning the notebook shows), nothing else
    said = re.search(r"\[('\w+'(?:, )?)+\]", _text(cells["register"]))
    assert said is not None
    assert set(re.findall(r"'(\w+)'", said.group())) == {"null_values"}
    shown = "".join(o.text for o in cells["register"].outputs
                    if o.output_type == "stream" and o.name == "stderr")
    assert "DataWarning: demo: cycling: null or NaN values in current_a" in shown, shown
    assert "RegistrationWarning" not in shown
    stats = _text(cells["split-stats"])
    for part in ("SplitStats", "[train]", "cycling.voltage_v"):
        assert part in stats
    report = _text(cells["report"])
    assert "PlanReport" in report
    aligned = _text(cells["aligned"])
    assert "AlignedBatch(idx=0, cycling=(8, 256, 2)" in aligned, aligned
    assert re.search(r"'hppc': '\d of 8 keys'", aligned), aligned
    for tag in ("split", "split-stats-plot", "plan", "batch-plot", "stats"):
        images = [o for o in cells[tag].outputs if "image/png" in o.get("data", {})]
        assert len(images) == 1, (tag, cells[tag].outputs)
    batch_html = cells["batch"].outputs[-1].data["text/html"]
    assert "target_valid True" in batch_html
    counts = re.search(r"mask True (\d+), target_valid True (\d+)", _text(cells["batch"]))
    assert counts is not None
    assert int(counts.group(2)) < int(counts.group(1))  # null targets under the mask
    train = _text(cells["train"])
    epochs = re.findall(r"epoch (\d): mean loss ([\w.]+) over (\d+) of (\d+) steps, "
                        r"validation ([\w.]+)", train)
    assert [e[0] for e in epochs] == ["0", "1", "2"], train
    for _epoch, loss, steps, total, val in epochs:
        assert math.isfinite(float(loss)), train  # no NaN from a null target
        assert math.isfinite(float(val)), train
        assert 5 < int(steps) <= int(total)  # len(train): the epoch's batch count
    assert float(epochs[-1][1]) < float(epochs[0][1]), train  # it learns
    report_plain = _text(cells["report"])
    assert "warning" not in report_plain  # the quickstart's plan pads little
