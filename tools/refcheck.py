"""References that must resolve: docstrings' roles and the docs' paths and anchors.

``python -m tools.refcheck`` prints one line per broken reference and exits 1 if
there is any (0 otherwise); ``tests/repo/test_refcheck.py`` runs the same checks.

* **Docstrings** (and ``#:`` attribute comments) in ``broker/``, ``osqueue_spark/``
  and ``tools/``: every ``:func:``, ``:class:``, ``:mod:``, ``:meth:``, ``:attr:``,
  ``:data:`` and ``:exc:`` target is looked up as Sphinx would look it up: in the
  enclosing classes, then the module, then as a full dotted name (``.name``: in
  the module or any package above it). A target is found by importing its module
  and reading its attributes (an instance attribute counts when the class
  annotates it or assigns ``self.name``); ``:mod:`` must name a module. A
  double-backticked repository path in a docstring must exist, as in the docs.
* **Docs** (``README.md``, ``docs/*.md``): every relative link and image names a
  file that exists, every ``#anchor`` (alone or after a ``.md`` file) is the
  GitHub slug of one of the target's headings (or an ``<a id>``), and every
  backticked path that starts with a top-level folder or file of the repository
  (``broker/model/format/codec.py``, ``docs/``, ``tests/support/faults.py:120``) exists,
  with at least that many lines when it gives a line number. Fenced code blocks
  are not read.
* **No issue numbers for reasons**: "(issue N)" in code, tests or docs says
  nothing once the tracker moves; the reason is written out instead. Another
  project's issue (``arrow-rs issue 4879``) may be cited.

Importing the modules runs their top-level code, as importing them anywhere
would: run it in the project's venv. A module that fails to import is reported,
not skipped.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The packages whose docstrings are checked.
PACKAGES = ("broker", "osqueue_spark", "tools")
#: The folders whose ``*.py`` files may not stand an issue number for a reason.
SOURCE_FOLDERS = ("broker", "osqueue_spark", "tools", "tests", "bench", "jobs", "notebooks")
ROLE = re.compile(r":(func|class|mod|meth|attr|data|exc):`([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


@dataclass(frozen=True)
class Problem:
    """One reference that does not resolve: where it is, and what is wrong."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


# -- docstrings ----------------------------------------------------------------

@dataclass(frozen=True)
class _Doc:
    text: str
    line: int  # of the text's first line
    classes: tuple[str, ...]  # the enclosing classes, outermost first


def _docs(tree: ast.Module, source: str) -> Iterator[_Doc]:
    """Every docstring and ``#:`` comment of a module, with its enclosing classes."""
    spans: list[tuple[int, int, tuple[str, ...]]] = []

    def walk(node: ast.AST, classes: tuple[str, ...]) -> Iterator[_Doc]:
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            yield _Doc(body[0].value.value, body[0].lineno, classes)
        for child in ast.iter_child_nodes(node):
            inner = classes
            if isinstance(child, ast.ClassDef):
                inner = (*classes, child.name)
                spans.append((child.lineno, child.end_lineno or child.lineno, inner))
            yield from walk(child, inner)

    yield from walk(tree, ())
    for number, line in enumerate(source.splitlines(), 1):
        if line.lstrip().startswith("#:"):
            inside = [c for start, end, c in spans if start <= number <= end]
            yield _Doc(line, number, max(inside, key=len, default=()))


def _import(name: str) -> ModuleType | None:
    """The module ``name``, or None if there is no such module (a failure inside
    an existing module raises)."""
    if name.endswith("__main__"):
        return None  # importing it would run it
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(f"{exc.name}.")):
            return None
        raise


def _has_instance_attribute(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}) or name in getattr(klass, "__slots__", ()):
            return True
        if name in (getattr(klass, "model_fields", None) or {}):
            return True
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"\bself\.{re.escape(name)}\s*(:[^=\n]*)?=[^=]", source):
            return True
    return False


def lookup(dotted: str) -> tuple[bool, Any]:
    """``(True, the object)`` if a full dotted name names one, else ``(False, None)``
    (an instance attribute is found as ``(True, None)``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        if not all(parts[:cut]):
            return False, None
        module = _import(".".join(parts[:cut]))
        if module is None:
            continue
        obj: Any = module
        for i, part in enumerate(parts[cut:], cut):
            if not hasattr(obj, part):
                last = i == len(parts) - 1
                return (last and isinstance(obj, type) and _has_instance_attribute(obj, part)), None
            obj = getattr(obj, part)
        return True, obj
    return False, None


def candidates(target: str, module: str, classes: tuple[str, ...]) -> list[str]:
    """The full names ``target`` may mean, written in ``module`` inside ``classes``,
    in the order Sphinx tries them."""
    if target.startswith("."):
        target = target[1:]
        parts = module.split(".")
        scopes = [".".join((*parts, *classes[:i])) for i in range(len(classes), 0, -1)]
        scopes += [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
        return [f"{scope}.{target}" for scope in scopes]
    names = [".".join((module, *classes[:i], target)) for i in range(len(classes), 0, -1)]
    return [*names, f"{module}.{target}", target, f"builtins.{target}"]


def _target(text: str) -> str:
    text = text.strip()
    if text.endswith(">") and "<" in text:  # :role:`title <target>`
        text = text[text.rindex("<") + 1:-1]
    return text.lstrip("~!").removesuffix("()").strip()


def check_reference(role: str, target: str, module: str,
                    classes: tuple[str, ...] = ()) -> str | None:
    """None if ``:role:`target``` written in ``module`` resolves, else what is wrong."""
    name = _target(target)
    if not re.fullmatch(r"\.?[A-Za-z_][\w.]*", name):
        return f":{role}:`{target}` is not a dotted name"
    for full in candidates(name, module, classes):
        found, obj = lookup(full)
        if not found:
            continue
        if role == "mod" and not isinstance(obj, ModuleType):
            return f":mod:`{target}` names {full}, which is not a module"
        return None
    return f":{role}:`{target}` does not resolve (from {module})"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def docstring_problems(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Problem]:
    """Every docstring role in ``packages`` (folders under ``root``) that does not resolve."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    problems = []
    top = _top_level(root)
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            module = module_name(path, root)
            source = path.read_text()
            try:
                if _import(module) is None and not module.endswith("__main__"):
                    problems.append(Problem(rel, 1, f"cannot import {module}"))
            except Exception as exc:
                problems.append(Problem(rel, 1, f"importing {module} raised {exc!r}"))
                continue
            for doc in _docs(ast.parse(source), source):
                for match in ROLE.finditer(doc.text):
                    line = doc.line + doc.text.count("\n", 0, match.start())
                    try:
                        wrong = check_reference(match[1], match[2], module, doc.classes)
                    except Exception as exc:
                        wrong = f":{match[1]}:`{match[2]}`: looking it up raised {exc!r}"
                    if wrong:
                        problems.append(Problem(rel, line, wrong))
                for match in _LITERAL.finditer(doc.text):
                    wrong = _path_problem(match[1].strip(), root, top)
                    if wrong:
                        line = doc.line + doc.text.count("\n", 0, match.start())
                        problems.append(Problem(rel, line, wrong))
    return problems


# -- Markdown ------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_HTML = re.compile(r"\b(?:href|src)=\"([^\"]+)\"")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_ANCHOR_TAG = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
_REPO_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?(?::(\d+))?")


def _unfenced(text: str) -> str:
    """``text`` with every fenced code block blanked (its line breaks kept)."""
    out, fence = [], ""
    for line in text.split("\n"):
        opening = _FENCE.match(line)
        if fence:
            if opening and opening[1][0] == fence[0] and len(opening[1]) >= len(fence) \
                    and not line.strip().strip(fence[0]):
                fence = ""
            out.append("")
        elif opening:
            fence = opening[1]
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading of this (rendered) text: lower case,
    letters, digits, ``_`` and ``-`` kept, spaces made ``-``, the rest dropped."""
    kept = []
    for ch in heading.strip().lower():
        category = unicodedata.category(ch)
        if ch in " -" or category[0] in "LNM" or category == "Pc":
            kept.append("-" if ch == " " else ch)
    return "".join(kept)


def _rendered(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    return text.replace("`", "").replace("*", "")


def anchors(markdown: str) -> set[str]:
    """Every anchor a Markdown page has on GitHub: its headings' slugs (a repeat
    gets ``-1``, ``-2``...) and its ``<a id>``/``<a name>`` tags."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _unfenced(markdown).split("\n"):
        heading = _HEADING.match(line)
        if heading:
            slug = github_slug(_rendered(heading[2]))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    found.update(_ANCHOR_TAG.findall(markdown))
    return found


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _link_problem(target: str, page: Path, root: Path) -> str | None:
    if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
        return None  # http:, https:, mailto:...
    path_part, _, anchor = target.partition("#")
    if path_part.startswith("/"):
        dest = root / path_part.lstrip("/")
    else:
        dest = page.parent / path_part if path_part else page
    if not dest.exists():
        return f"link {target!r}: no file {dest.resolve().relative_to(root.resolve())}" \
            if dest.resolve().is_relative_to(root.resolve()) else f"link {target!r}: no file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
        return f"link {target!r}: {dest.name} has no heading with anchor #{anchor}"
    return None


def _top_level(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if not p.name.startswith(".")}


def _path_problem(span: str, root: Path, top: set[str]) -> str | None:
    match = _REPO_PATH.fullmatch(span)
    if not match or "/" not in span or span.split("/")[0] not in top:
        return None  # not a repository path (a URL path, a key layout, a glob...)
    path = root / span.split(":")[0]
    if not path.exists():
        return f"`{span}`: no such file in the repository"
    if match[1] and (not path.is_file() or len(path.read_text().splitlines()) < int(match[1])):
        return f"`{span}`: {path.name} has no line {match[1]}"
    return None


def markdown_problems(page: Path, root: Path = ROOT) -> list[Problem]:
    """Every link, image, anchor and backticked repository path in ``page`` that
    does not resolve."""
    rel = str(page.relative_to(root))
    text = _unfenced(page.read_text())
    top = _top_level(root)
    problems = []
    for code in _CODE.finditer(text):
        span = code[2].strip()
        wrong = _path_problem(span, root, top)
        if wrong:
            problems.append(Problem(rel, _line_of(text, code.start()), wrong))
    prose = _CODE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)  # code spans are no links
    targets = [(m.start(1), m[1]) for pattern in (_LINK, _REFDEF, _HTML)
               for m in pattern.finditer(prose)]
    for pos, target in sorted(targets):
        wrong = _link_problem(target, page, root)
        if wrong:
            problems.append(Problem(rel, _line_of(prose, pos), wrong))
    return problems


_ISSUE = re.compile(r"(?:([\w./-]+)\s+)?\b[Ii]ssues?\s+#?\d+")


def issue_number_problems(path: Path, root: Path = ROOT) -> list[Problem]:
    """Every line of ``path`` that names one of our issues by number (another
    project's, ``arrow-rs issue 4879``, is a citation: its name has a ``-``,
    ``/`` or ``.`` in it)."""
    problems = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in _ISSUE.finditer(line):
            if not (match[1] and re.search(r"[-/.]", match[1])):
                problems.append(Problem(str(path.relative_to(root)), number,
                                        f"{match[0].strip()!r}: say the reason, not the issue"))
    return problems


def doc_pages(root: Path = ROOT) -> list[Path]:
    """The pages checked: ``README.md`` and ``docs/*.md``."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def all_problems(root: Path = ROOT) -> list[Problem]:
    problems = docstring_problems(root)
    for page in doc_pages(root):
        problems += markdown_problems(page, root) + issue_number_problems(page, root)
    for folder in SOURCE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            problems += issue_number_problems(path, root)
    return problems


def main() -> int:
    problems = all_problems()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} broken reference(s)" if problems else "every reference resolves")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
