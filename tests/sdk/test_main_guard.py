"""Which line of a script runs outside ``if __name__ == "__main__":`` (windpipe.sdk._spawn): what
the DataLoader checks in the parent before ``spawn`` workers import the script again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from windpipe.sdk import InvalidConfig
from windpipe.sdk._spawn import check_main_guard, unguarded_main_line

ROOT = Path(__file__).resolve().parents[2]
ASK = "from windpipe.sdk._spawn import unguarded_main_line\n"


def _where(tmp_path: Path, body: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(ASK + body)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc.stdout.strip()


@pytest.mark.parametrize(("body", "expected"), [
    ("print(unguarded_main_line())\n", "2"),
    ("def main():\n    print(unguarded_main_line())\n\nmain()\n", "5"),
    ('if __name__ == "__main__":\n    print(unguarded_main_line())\n', "None"),
    ('def main():\n    print(unguarded_main_line())\n\nif "__main__" == __name__:\n'
     '    main()\n', "None"),
    ('if __name__ == "__main__":\n    pass\nprint(unguarded_main_line())\n', "4"),
])
def test_the_running_line_of_the_script(tmp_path: Path, body: str, expected: str) -> None:
    out = _where(tmp_path, body)
    if expected == "None":
        assert out == "None"
    else:
        path, line = out.strip("()").split(", ")
        assert path.strip("'").endswith("train.py")
        assert line == expected


def test_not_a_script_is_never_refused() -> None:
    code = ASK + "print(unguarded_main_line())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "None"
    assert unguarded_main_line() is None  # pytest's __main__ runs no module-level loop here


def test_fork_is_not_checked() -> None:
    check_main_guard("fork")  # a forked worker does not import the script again


def test_the_refusal_names_the_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("from windpipe.sdk._spawn import check_main_guard\n\n"
                      "check_main_guard('spawn')\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert f"{script}:3 starts DataLoader workers with 'spawn'" in proc.stderr
    assert InvalidConfig.__name__ in proc.stderr
