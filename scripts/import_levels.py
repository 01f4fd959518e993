"""Count a package's files and its longest chain of intra-package imports (docs/architecture.md).

    python scripts/import_levels.py                 # aogpt_plugin, imports inside functions included
    python scripts/import_levels.py --module-level  # only imports at the top of each file

Reads the source with `ast` (nothing is imported). A level is one module; package `__init__.py`
files count as files but not as levels, since `from .x import y` passes through them. Imports under
`if TYPE_CHECKING:` are not counted: they name types for annotations and never run.
"""

from __future__ import annotations

import argparse
import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `package` (a package maps to its __init__)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _is_type_checking(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_nodes(tree: ast.Module, module_level: bool) -> list[ast.AST]:
    """The nodes that run: every node, or with `module_level` the top-level statements, less the bodies
    of `if TYPE_CHECKING:` blocks (their `else` runs)."""
    if module_level:
        return list(tree.body)
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if _is_type_checking(node):
            todo += [node.test, *node.orelse]
        else:
            todo += ast.iter_child_nodes(node)
    return out


def imported_modules(name: str, path: Path, modules: dict[str, Path], module_level: bool) -> set[str]:
    """The package's modules that `name` imports (relative and absolute); not those under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    nodes = _run_nodes(tree, module_level)
    here = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            parts = here.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def longest_chain(package: Path, module_level: bool = False) -> tuple[int, list[str]]:
    """(number of files, the longest import chain as module names, package __init__s skipped)."""
    modules = module_files(package)
    packages = {m for m, p in modules.items() if p.name == "__init__.py"}
    deps = {m: imported_modules(m, p, modules, module_level) - packages for m, p in modules.items()}

    @functools.cache
    def chain(m: str) -> tuple[str, ...]:  # the package's import graph has no cycles (import-linter layers)
        return (m, *max((chain(d) for d in deps[m]), key=len, default=()))

    return len(modules), list(max((chain(m) for m in modules if m not in packages), key=len))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, default=ROOT / "aogpt_plugin", help="package folder")
    parser.add_argument("--module-level", action="store_true", help="ignore imports inside functions")
    args = parser.parse_args()
    if not (args.package / "__init__.py").is_file():
        parser.exit(2, f"error: --package {str(args.package)!r} is not a Python package folder (no __init__.py)\n")
    files, chain = longest_chain(args.package, args.module_level)
    short = [m.split(".", 1)[1] if "." in m else m for m in chain]
    print(f"{files} files; longest import chain {len(chain)} levels: {' -> '.join(short)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
