"""Shared fixtures for the end-to-end tests: the real hearth binary and real files."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The shared test data beside the repository ($HEARTH_SHARED_DIR: elsewhere, e.g. on a GPU machine).
SHARED = pathlib.Path(os.environ.get("HEARTH_SHARED_DIR", ROOT.parent / "shared"))


def _default_model():
    path = os.environ.get("HEARTH_DEFAULT_MODEL")
    if path:
        return pathlib.Path(path)
    return ROOT / "models" / "default.gguf"  # installed by scripts/lib.sh


@pytest.fixture(scope="session")
def hearth_bin():
    path = pathlib.Path(os.environ.get("HEARTH_BIN", ROOT / "build" / "hearth"))
    assert path.exists(), f"hearth binary not found at {path}; build first (scripts/test.sh)"
    return path


@pytest.fixture(scope="session")
def default_model():
    path = _default_model()
    assert path.exists(), f"default model not found at {path}"
    return path


@pytest.fixture(scope="session")
def shared_dir():
    assert SHARED.exists(), f"shared data not found at {SHARED}"
    return SHARED


@pytest.fixture
def run_hearth(hearth_bin):
    """Runs hearth with arguments; returns the CompletedProcess (text mode)."""

    def run(*args, input=None, check=False, timeout=120):
        return subprocess.run([str(hearth_bin), *map(str, args)], input=input, capture_output=True,
                              text=True, timeout=timeout, check=check)

    return run
