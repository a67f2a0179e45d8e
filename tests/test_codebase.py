"""The codebase keeps its own rules: ruff clean, imports one way, every folder says what it is."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("logstore", "coordination", "wire", "actors", "pipelines", "cli")
# What each package may import from the others (docs/architecture.md).
ALLOWED = {
    "logstore": set(),
    "coordination": set(),
    # Kafka's wire protocol, without I/O: record batches are converted with the log's codec.
    "wire": {"logstore"},
    "actors": {"coordination", "logstore", "wire"},
    "pipelines": {"actors"},
    "cli": {"actors", "pipelines", "coordination", "logstore", "wire"},
}


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_one_way(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(found - ALLOWED[package] - {package})
        for path in (ROOT / package).rglob("*.py")
        if (found := _imported_packages(path)) - ALLOWED[package] - {package}
    }
    assert not offenders, f"{package} may import only {sorted(ALLOWED[package])}: {offenders}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_says_what_it_is(package: str) -> None:
    for init in (ROOT / package).rglob("__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring, f"{init.relative_to(ROOT)} needs a module docstring"


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    result = subprocess.run(
        [ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
