"""The package installs under the tsfix namespace only."""

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("generic_name", ["cli", "codemods"])
def test_no_generic_top_level_package(generic_name: str) -> None:
    # Run from a neutral directory so the checkout's own folders are not on sys.path.
    probe = subprocess.run([sys.executable, "-c", f"import {generic_name}"], cwd="/",
                           capture_output=True, text=True)
    assert probe.returncode != 0
    assert "ModuleNotFoundError" in probe.stderr


def test_namespaced_packages_import() -> None:
    assert importlib.import_module("tsfix.codemods.pipeline.engine").run
    assert importlib.import_module("tsfix.cli.main").main


def test_console_script_runs() -> None:
    probe = subprocess.run(["tsfix", "--version"], capture_output=True, text=True, cwd="/")
    assert probe.returncode == 0
    assert probe.stdout.startswith("tsfix, version ")
