"""The house rule, checked: imports only go down the layers the README's layout table lists.

Every ``import``/``from ... import`` in the packages (module level or inside a function) is read with ``ast``.
A module may import its own package, anything in a lower layer, and nothing beside or above it: a package
in the same layer is a peer it must not lean on (the engine does not import the local daemons, the console
does not import the benchmarks).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pipelines.base.settings import REPO_ROOT

LAYERS: tuple[tuple[str, ...], ...] = (
    ("pipelines.base",),
    ("delta_tables",),
    ("rules_cdc",),
    ("pipelines.engine", "pipelines.local", "pipelines.generator", "pipelines.outcomes"),
    (
        "pipelines.bench",
        "pipelines.chaos",
        "pipelines.console",
        "pipelines.dashboard",
        "pipelines.data_quality",
        "pipelines.notebook_tools",
    ),
    ("pipelines.commands",),
    ("pipelines.cli",),
)
"""Lowest first. Every module of ``pipelines``, ``delta_tables`` and ``rules_cdc`` belongs to exactly one entry."""

OUR_ROOTS = ("pipelines", "delta_tables", "rules_cdc")


def package_of(module: str) -> str | None:
    """The layer entry a dotted module name belongs to (longest match), or None for ``pipelines`` itself."""
    matches = [p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")]
    return max(matches, key=len) if matches else None


def layer_of(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every absolute import of our own packages in a file."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            # ``from pipelines import x`` imports the module pipelines.x; ``from a.b import Name`` imports a.b.
            target = next((n for n in reversed(names) if package_of(n)), node.module)
            found.append((node.lineno, target))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, name) for line, name in found if name.split(".")[0] in OUR_ROOTS]


def upward_imports(paths: list[Path]) -> list[str]:
    """Every import that goes beside or up a layer, as ``file:line: a -> b (why)``."""
    errors: list[str] = []
    for path in paths:
        here = package_of(module_name(path))
        if here is None:
            continue
        for line, target in imported_modules(path):
            there = package_of(target)
            if there is None or there == here:
                continue
            where = f"{path.relative_to(REPO_ROOT)}:{line}: {here} -> {there}"
            if layer_of(there) > layer_of(here):
                errors.append(f"{where} (up a layer)")
            elif layer_of(there) == layer_of(here):
                errors.append(f"{where} (a peer in the same layer)")
    return errors


def package_files() -> list[Path]:
    return sorted(p for root in OUR_ROOTS for p in (REPO_ROOT / root).rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    homeless = [module_name(p) for p in package_files() if package_of(module_name(p)) is None]
    assert homeless == ["pipelines"], f"modules outside every layer (add their folder to LAYERS): {homeless}"


def test_imports_only_go_down() -> None:
    assert upward_imports(package_files()) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from pipelines.engine.job import run_engine\n", "delta_tables -> pipelines.engine (up a layer)"),
        ("import pipelines.local.ports\n", "delta_tables -> pipelines.local (up a layer)"),
        ("def f():\n    from rules_cdc import manage\n", "delta_tables -> rules_cdc (up a layer)"),
        ("from pipelines.base.settings import Settings\n", None),
    ],
)
def test_the_check_sees_an_arrow_up(tmp_path: Path, source: str, expected: str | None) -> None:
    """The check itself can fail: a module planted in delta_tables/ importing upwards is reported."""
    planted = REPO_ROOT / "delta_tables" / f"_layering_probe_{tmp_path.name}.py"
    planted.write_text(source, encoding="utf-8")
    try:
        errors = upward_imports([planted])
    finally:
        planted.unlink()
    assert [e.split(": ", 1)[1] for e in errors] == ([expected] if expected else [])


def test_a_peer_in_the_same_layer_is_refused(tmp_path: Path) -> None:
    planted = REPO_ROOT / "pipelines" / "engine" / f"_layering_probe_{tmp_path.name}.py"
    planted.write_text("from pipelines.local.ports import free_port\n", encoding="utf-8")
    try:
        errors = upward_imports([planted])
    finally:
        planted.unlink()
    assert [e.split(": ", 1)[1] for e in errors] == ["pipelines.engine -> pipelines.local (a peer in the same layer)"]
