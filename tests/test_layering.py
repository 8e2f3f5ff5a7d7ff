"""Apps build on each other in one direction only; no import (top-level or inside a function)
goes back up.

    engines  ←  knowledge  ←  retrieval  ←  chat  ←  evaluation
                                                   ←  integrations

`docparse` (parsers and chunker) stands on the engines' Django-free modules (token counting, the
sandbox) and `demo` (the demo's content) on nothing; neither imports Django. Inside `knowledge` the rooms build on each other the same way:

    shared modules  ←  catalog  ←  items  ←  faqs  ←  documents  ←  admin, api, views, commands

and no module of it imports another that imports it back.

`ragsite.errors`, `ragsite.openapi` (the error shape in the schema), `ragsite.jsontext` (the JSON
decoder of every entry point) and the abuse limits
(`ragsite.throttles`, `ragsite.limits`, `ragsite.authentication`: Django and DRF only) and the
connection helpers (`ragsite.db`, Django only) and tracing (`ragsite.telemetry`: Django's settings
and OpenTelemetry only) are shared ground;
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
          "ragsite.db", "ragsite.executors", "ragsite.telemetry", "ragsite.jsontext"}
ABOVE_RETRIEVAL = {"chat", "evaluation", "integrations"}
ALLOWED = {
    "docparse": {"engines"},
    "demo": set(),
    "engines": set(),
    "knowledge": {"engines", "docparse", "demo"},
    "retrieval": {"engines", "knowledge", "docparse"},
    "chat": {"engines", "knowledge", "retrieval", "docparse"},
    "evaluation": {"engines", "knowledge", "retrieval", "chat", "docparse", "demo"},
    # Transports of the chat turn and of retrieval in other protocols; nothing imports them.
    "integrations": {"engines", "knowledge", "retrieval", "chat", "docparse"},
}
# Rooms of knowledge, lowest first; a module at the top level of knowledge (models, access,
# actors, events, epochs, vectors, cleanup, previews, …) is shared ground unless listed as top.
ROOMS = ["catalog", "items", "faqs", "documents"]
TOP = {"admin", "api", "views", "forms", "management", "tasks", "apps", "urls", "eventstream_urls"}


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


@pytest.mark.parametrize("package", ["docparse", "demo"])
def test_the_parsing_and_demo_packages_need_no_django(package):
    # when: every import of the package is read, and of the engines modules it uses
    frameworks = {"django", "rest_framework", "channels", "ragsite"}
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module in imported_modules(path):
            top = module.split(".")[0]
            if top in frameworks or (top in ALLOWED and top != package and top not in ALLOWED[package]):
                found.append(f"{path.relative_to(ROOT)} imports {module}")
            elif top == "engines":
                used = ROOT / (module.replace(".", "/") + ".py")
                found += [f"{module} imports {m}" for m in imported_modules(used) if m.split(".")[0] in frameworks]
    # then
    assert found == []


def knowledge_modules() -> dict[str, Path]:
    modules = {}
    for path in (ROOT / "knowledge").rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def level(module: str) -> int:
    """0: shared ground, 1…: the rooms in order, then the top."""
    part = module.split(".")[1] if module.count(".") else ""
    if part in ROOMS:
        return 1 + ROOMS.index(part)
    return len(ROOMS) + 1 if part in TOP or part.startswith("admin") else 0


def knowledge_imports() -> dict[str, set[str]]:
    modules = knowledge_modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for module in imported_modules(path):
            targets.update(m for m in (module, *(f"{module}.{n}" for n in imported_names(path, module))) if m in modules)
        graph[name] = targets - {name}
    return graph


def imported_names(path: Path, module: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == module:
            names.update(alias.name for alias in node.names)
    return names


def test_knowledge_rooms_import_only_the_rooms_below_them():
    # when
    graph = knowledge_imports()
    # then: a room reaches the shared ground and the rooms before it, never one after it
    upward = sorted(
        f"{source} imports {target}" for source, targets in graph.items() for target in targets
        if level(target) > level(source) or (level(target) == level(source) and level(source) > 0
                                             and source.split(".")[1] != target.split(".")[1] and level(source) <= len(ROOMS))
    )
    assert upward == []


def test_knowledge_has_no_import_cycle():
    # given
    graph = knowledge_imports()
    # when: a depth-first walk looks for a module reached again while it is being walked
    cycles, state = [], {}

    def walk(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target):] + [target] if target in path else [module, target])
            elif target not in state:
                walk(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    # then
    assert cycles == []


def test_the_checker_sees_function_level_imports(tmp_path):
    # given: a module that hides an import inside a function
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from retrieval.service import RetrievalService\n", encoding="utf-8")
    # when / then
    assert "retrieval.service" in imported_modules(module)
