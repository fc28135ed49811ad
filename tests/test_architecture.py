"""The layers of docs/ARCHITECTURE.md hold: no import cycle anywhere (function-level
imports counted), the import-linter contracts kept, and a module's size kept readable."""

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("conversations", "accounts", "web", "config")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
MAX_MODULE_LINES = 400


def import_cycles() -> list[list[str]]:
    """Every group of modules that import each other, directly or through others."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    edges = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in edges.get(module, ()):
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(edges):
        if module not in order:
            visit(module)
    return cycles


def test_no_module_takes_part_in_an_import_cycle():
    assert import_cycles() == []


def test_the_cycle_check_sees_a_lazy_import(tmp_path, monkeypatch):
    tree = copy_of_the_project(tmp_path)
    append(
        tree / "conversations/models/conversations.py",
        "def _late():\n    from conversations import services\n",
    )
    monkeypatch.syspath_prepend(str(tree))
    for name in [name for name in sys.modules if name.split(".")[0] in PACKAGES]:
        monkeypatch.delitem(sys.modules, name)
    cycles = import_cycles()
    assert any({"conversations.models", "conversations.services"} <= set(c) for c in cycles)


def test_the_import_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("module", "upward_import", "broken"),
    [
        # The domain reaching up to the engine, even inside a function.
        (
            "conversations/services/messages.py",
            "def _late():\n    from conversations.engine import run_start\n",
            "Transports over the engine over the domain BROKEN",
        ),
        # The engine reaching up to a transport.
        (
            "conversations/engine/runner.py",
            "from conversations import consumers\n",
            "Transports over the engine over the domain BROKEN",
        ),
        # A transport reaching into the engine's insides.
        (
            "conversations/api/views/runs.py",
            "from conversations.engine.runner import run_step\n",
            "Transports use the engine's public surface only BROKEN",
        ),
        (
            "accounts/services.py",
            "from conversations.models import Conversation\n",
            "accounts never imports conversations (nor the web pages) BROKEN",
        ),
        # A transport writing its own SQL through the domain's statements.
        (
            "conversations/admin/paging.py",
            "from conversations.sql import run_lease_take\n",
            "Hand-written SQL is reached through services, selectors and the engine BROKEN",
        ),
        # The domain's statements reaching up to the engine.
        (
            "conversations/sql/runs.py",
            "from conversations.engine import lease\n",
            "Transports over the engine over the domain BROKEN",
        ),
    ],
)
def test_an_upward_import_breaks_a_contract(tmp_path, module, upward_import, broken):
    tree = copy_of_the_project(tmp_path)
    append(tree / module, upward_import)
    result = lint_imports(tree)
    assert result.returncode != 0
    assert broken in result.stdout


def test_no_module_is_over_the_size_guideline():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    assert {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def application_modules() -> list[Path]:
    """Every module a newcomer may look for: all but migrations and empty package markers."""
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and path.read_text().strip()
    )


def named_in_architecture(path: Path, text: str) -> bool:
    """Named by its path from the repository root (`config/ops.py`) or from its app
    (`engine/runner.py`), in backticks."""
    relative = path.relative_to(ROOT)
    forms = {relative.as_posix(), Path(*relative.parts[1:]).as_posix()}
    return any(f"`{form}`" in text for form in forms)


def test_every_module_has_its_line_in_the_architecture_page():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    missing = [
        str(path.relative_to(ROOT))
        for path in application_modules()
        if not named_in_architecture(path, text)
    ]
    assert missing == [], "docs/ARCHITECTURE.md names no line for these modules"


def test_a_module_is_found_by_its_path_from_the_root_or_its_app():
    module = ROOT / "conversations" / "engine" / "runner.py"
    assert named_in_architecture(module, "- `engine/runner.py`: one step")
    assert named_in_architecture(module, "see `conversations/engine/runner.py`")
    assert not named_in_architecture(module, "- `runner.py`: one step")
    assert not named_in_architecture(module, "- `engine/runners.py`: one step")


def copy_of_the_project(tmp_path: Path) -> Path:
    tree = tmp_path / "project"
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code)


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
    )
