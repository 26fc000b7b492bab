"""The linter: `ruff check` (configured in pyproject.toml) passes on the whole repository."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.fail(f"ruff check found problems:\n{result.stdout}{result.stderr}", pytrace=False)
