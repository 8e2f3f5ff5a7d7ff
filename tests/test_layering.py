"""Apps build on each other in one direction only; no import (top-level or inside a function)
goes back up.

    engines  ←  knowledge  ←  retrieval  ←  chat  ←  evaluation

`ragsite.errors`, `ragsite.openapi` (the error shape in the schema) and the abuse limits
(`ragsite.throttles`, `ragsite.limits`, `ragsite.authentication`: Django and DRF only) and the
connection helpers (`ragsite.db`, Django only) are shared ground;
`ragsite.api` (the API error shape, which knows retrieval's errors) serves the layers above
retrieval; the rest of `ragsite` (urls, asgi, routing) wires everything together and is imported
by no app.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GROUND = {"ragsite.errors", "ragsite.openapi", "ragsite.throttles", "ragsite.limits", "ragsite.authentication",
          "ragsite.db", "ragsite.executors"}
ABOVE_RETRIEVAL = {"chat", "evaluation"}
ALLOWED = {
    "engines": set(),
    "knowledge": {"engines"},
    "retrieval": {"engines", "knowledge"},
    "chat": {"engines", "knowledge", "retrieval"},
    "evaluation": {"engines", "knowledge", "retrieval", "chat"},
}


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return modules


def violations(app: str) -> list[str]:
    found = []
    for path in sorted((ROOT / app).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for module in imported_modules(path):
            top = module.split(".")[0]
            shared = GROUND | ({"ragsite.api"} if app in ABOVE_RETRIEVAL else set())
            if top == "ragsite" and module not in shared:
                found.append(f"{path.relative_to(ROOT)} imports {module}")
            elif top in ALLOWED and top != app and top not in ALLOWED[app]:
                found.append(f"{path.relative_to(ROOT)} imports {module}")
    return found


@pytest.mark.parametrize("app", sorted(ALLOWED))
def test_app_imports_only_the_layers_below_it(app):
    # given: the layering above
    # when: every import of the app's modules is read, function-level ones included
    found = violations(app)
    # then: none reaches a layer above or beside it
    assert found == []


def test_the_checker_sees_function_level_imports(tmp_path):
    # given: a module that hides an import inside a function
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from retrieval.service import RetrievalService\n", encoding="utf-8")
    # when / then
    assert "retrieval.service" in imported_modules(module)
