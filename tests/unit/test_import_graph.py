"""The operator's modules import each other without circles, importing the operator's
package changes nothing outside it (Kopf's default registry is set only by the module for
plain ``kopf run``), and the benchmarks and the shared support (``testing``) import no test
module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp


def circles() -> list[list[str]]:
    """Every set of two or more modules that import one another through some chain."""
    graph = grimp.build_graph("gpusched", cache_dir=None)
    edges = {
        m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in graph.modules
    }
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in edges[module]:
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            component = []
            while (top := stack.pop()) != module:
                component.append(top)
            if component:
                found.append(sorted([module, *component]))

    for module in sorted(edges):
        if module not in order:
            visit(module)
    return sorted(found)


def test_no_import_circles() -> None:
    assert circles() == []


def test_importing_the_operator_leaves_kopfs_default_registry_alone() -> None:
    script = """
import kopf
before = kopf.get_default_registry()
import gpusched.handlers
assert kopf.get_default_registry() is before, "importing gpusched.handlers changed it"
import gpusched.handlers.plain
assert kopf.get_default_registry() is gpusched.handlers.registry, "plain did not set it"
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


def test_benchmarks_and_shared_support_import_no_test_module() -> None:
    root = Path(__file__).resolve().parents[2]
    importers = [*(root / "bench").glob("*.py"), *(root / "testing").rglob("*.py")]
    found = [
        f"{path.relative_to(root)}:{node.lineno}"
        for path in importers
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tests")
        or (
            isinstance(node, ast.Import)
            and any(alias.name.split(".")[0] == "tests" for alias in node.names)
        )
    ]
    assert found == []
