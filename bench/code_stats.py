"""Size figures for the code: the largest modules, the longest functions, signatures with a bare ``Any``.

    python bench/code_stats.py                      # hivebatch/, the 10 largest of each
    python bench/code_stats.py hivebatch/cells hivebatch/sharing --top 5
    python bench/code_stats.py --any                # also list every function with a bare Any

A module's size is its line count; a function's is from its ``def`` (decorators included) to its last
line. A bare ``Any`` is an argument or return annotation that is ``Any`` itself or a union holding it
(``Any | None``); ``dict[str, Any]`` says what the container is and is not counted.
"""

from __future__ import annotations

import argparse
import ast
import signal
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LIMIT = 500
FUNCTION_LIMIT = 80


@dataclass(frozen=True)
class Function:
    path: str
    name: str  # Class.method for methods
    line: int
    lines: int
    bare_any: bool


def _is_any(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "Any"
    if isinstance(node, ast.Attribute):
        return node.attr == "Any"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            return _is_any(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_any(node.left) or _is_any(node.right)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name | ast.Attribute):
        outer = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
        if outer in ("Optional", "Union"):
            inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return any(_is_any(e) for e in inner)
    return False


def _signature_has_bare_any(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
    annotations = [p.annotation for p in params if p.annotation is not None]
    if fn.returns is not None:
        annotations.append(fn.returns)
    return any(_is_any(x) for x in annotations)


def _functions(tree: ast.AST, path: str, prefix: str = "") -> Iterator[Function]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, path, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            end = node.end_lineno or node.lineno
            yield Function(
                path, prefix + node.name, node.lineno, end - first + 1, _signature_has_bare_any(node)
            )
            yield from _functions(node, path, f"{prefix}{node.name}.")


def collect(paths: list[Path]) -> tuple[dict[str, int], list[Function]]:
    files = sorted({f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py"))})
    sizes: dict[str, int] = {}
    functions: list[Function] = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        rel = str(f.resolve().relative_to(ROOT)) if f.resolve().is_relative_to(ROOT) else str(f)
        sizes[rel] = len(text.splitlines())
        functions.extend(_functions(ast.parse(text, filename=str(f)), rel))
    return sizes, functions


def report(paths: list[Path], top: int, list_any: bool) -> None:
    sizes, functions = collect(paths)
    lengths = [f.lines for f in functions]
    bare = [f for f in functions if f.bare_any]
    print(f"{len(sizes)} modules, {sum(sizes.values())} lines, {len(functions)} functions")
    if lengths:
        print(f"median function {statistics.median(lengths):g} lines, longest {max(lengths)}")
    print(f"modules over {MODULE_LIMIT} lines: {sum(1 for n in sizes.values() if n > MODULE_LIMIT)}")
    print(f"functions over {FUNCTION_LIMIT} lines: {sum(1 for n in lengths if n > FUNCTION_LIMIT)}")
    print(f"functions with a bare Any in their signature: {len(bare)}")
    print("\nlargest modules (lines):")
    for path, n in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        print(f"  {n:5d}  {path}")
    print("\nlongest functions (lines):")
    for f in sorted(functions, key=lambda f: (-f.lines, f.path, f.line))[:top]:
        print(f"  {f.lines:5d}  {f.path}:{f.line} {f.name}")
    if list_any:
        print("\nfunctions with a bare Any in their signature:")
        for f in sorted(bare, key=lambda f: (f.path, f.line)):
            print(f"  {f.path}:{f.line} {f.name}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path, help="files or folders (default: hivebatch/)")
    ap.add_argument("--top", type=int, default=10, help="rows per list (default 10)")
    ap.add_argument("--any", action="store_true", help="list every function with a bare Any")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    report(args.paths or [ROOT / "hivebatch"], args.top, args.any)
    return 0


if __name__ == "__main__":
    sys.exit(main())
