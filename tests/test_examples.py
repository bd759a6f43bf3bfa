from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


def test_demo_runs_and_checks_consistency(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("demo", DEMO)
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    sys.modules["demo"] = demo
    spec.loader.exec_module(demo)
    assert demo.main(["--workers", "3", "--sessions", "2", "--turns", "30"]) == 0
    out = capsys.readouterr().out
    assert "appends          90 " in out
    assert "lost/duplicated  0/0" in out
    assert "consistency      OK" in out
