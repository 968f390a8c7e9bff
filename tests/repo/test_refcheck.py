"""tools/refcheck.py: every docstring reference, doc link, anchor and repository
path in the tree resolves, and the checker finds each kind of broken one."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import refcheck

#: Built, not written, so this file passes the issue-number scan it tests.
ISSUE = "iss" + "ue"


def test_every_reference_in_the_tree_resolves() -> None:
    assert [str(p) for p in refcheck.all_problems()] == []


@pytest.fixture()
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """An empty package under ``tmp_path`` with a name no other test imports."""
    name = f"refpkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text('"""A package."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_docstring_references_resolve_as_sphinx_would(package: tuple[Path, str]) -> None:
    root, name = package
    _write(root / name / "mod.py", f'''\
        """Module: :func:`helper`, :class:`~{name}.mod.Thing`, :data:`.CONST`,
        :mod:`{name}.mod`, :attr:`Thing.size`, :meth:`Thing.grow`, :exc:`ValueError`,
        :func:`os.path.join`, :class:`title <{name}.mod.Thing>`, :func:`helper()`,
        ``{name}/mod.py``."""

        CONST = 1


        def helper() -> None:
            """Its sibling :class:`Thing`."""


        class Thing:
            """:meth:`grow` and :attr:`size`, from inside the class."""

            def __init__(self) -> None:
                self.size = 0

            def grow(self) -> None:
                """Itself, :meth:`grow`, and the module's :data:`CONST`."""
    ''')
    assert refcheck.docstring_problems(root, (name,)) == []


def test_each_kind_of_broken_docstring_reference_is_reported(package: tuple[Path, str]) -> None:
    root, name = package
    _write(root / name / "mod.py", f'''\
        """Module: :func:`gone`, :meth:`grow`,
        :mod:`{name}.mod.helper`, :attr:`Thing.nothing`,
        :class:`{name}.moved.Thing`, ``{name}/moved.py``."""

        #: Like :data:`LIMIT`.
        CONST = 1


        def helper() -> None:
            pass


        class Thing:
            def grow(self) -> None:
                pass
    ''')
    problems = [(p.path, p.line, p.message) for p in refcheck.docstring_problems(root, (name,))]
    path = f"{name}/mod.py"
    assert problems == [
        (path, 1, f":func:`gone` does not resolve (from {name}.mod)"),
        (path, 1, f":meth:`grow` does not resolve (from {name}.mod)"),  # module scope: no class
        (path, 2, f":mod:`{name}.mod.helper` names {name}.mod.helper, which is not a module"),
        (path, 2, f":attr:`Thing.nothing` does not resolve (from {name}.mod)"),
        (path, 3, f":class:`{name}.moved.Thing` does not resolve (from {name}.mod)"),
        (path, 3, f"`{name}/moved.py`: no such file in the repository"),
        (path, 5, f":data:`LIMIT` does not resolve (from {name}.mod)"),
    ]


def test_a_module_that_fails_to_import_is_reported(package: tuple[Path, str]) -> None:
    root, name = package
    _write(root / name / "broken.py", '"""Broken."""\nraise RuntimeError("at import")\n')
    problems = refcheck.docstring_problems(root, (name,))
    assert [(p.path, p.message) for p in problems] == [
        (f"{name}/broken.py", f"importing {name}.broken raised RuntimeError('at import')")]


@pytest.mark.parametrize(("heading", "slug"), [
    ("The queue object (format version 4)", "the-queue-object-format-version-4"),
    ("`push_many` and retries", "push_many-and-retries"),
    ("Cross-site requests: what is refused", "cross-site-requests-what-is-refused"),
    ("What's new? Ünïcode, too", "whats-new-ünïcode-too"),
    ("[A link](other.md) in a heading", "a-link-in-a-heading"),
])
def test_anchors_are_githubs_slugs(heading: str, slug: str) -> None:
    assert slug in refcheck.anchors(f"# {heading}\n")


def test_a_repeated_heading_gets_a_numbered_anchor_and_fences_hide_headings() -> None:
    text = "# Tests\n\n## Tests\n\n```\n# not a heading\n```\n\n<a id=\"here\"></a>\n"
    assert refcheck.anchors(text) == {"tests", "tests-1", "here"}


def test_each_kind_of_broken_doc_reference_is_reported(tmp_path: Path) -> None:
    _write(tmp_path / "broker" / "codec.py", "a = 1\nb = 2\n")
    _write(tmp_path / "docs" / "b.md", "# B page\n\n## Its part\n")
    _write(tmp_path / "docs" / "a.md", """\
        # A page

        Fine: [b](b.md), [its part](b.md#its-part), [here](#a-page), [up](../broker/),
        [web](https://example.com/x#y), `broker/codec.py`, `broker/codec.py:2`,
        `queues/docs/queue.json`, `{prefix}/{queue}/queue.json`, `broker/*.py`.

        Broken: [no file](c.md), [no anchor](b.md#gone),
        [no local anchor](#nowhere), ![no image](pic.png), `broker/moved.py`,
        `broker/codec.py:3`.

        ```
        [inside a fence](not-checked.md) `broker/not-checked.py`
        ```

        [ref]: missing.md
        """)
    problems = [(p.line, p.message)
                for p in refcheck.markdown_problems(tmp_path / "docs" / "a.md", tmp_path)]
    assert problems == [
        (8, "`broker/moved.py`: no such file in the repository"),
        (9, "`broker/codec.py:3`: codec.py has no line 3"),
        (7, "link 'c.md': no file docs/c.md"),
        (7, "link 'b.md#gone': b.md has no heading with anchor #gone"),
        (8, "link '#nowhere': a.md has no heading with anchor #nowhere"),
        (8, "link 'pic.png': no file docs/pic.png"),
        (15, "link 'missing.md': no file docs/missing.md"),
    ]


def test_an_issue_number_for_a_reason_is_reported(tmp_path: Path) -> None:
    _write(tmp_path / "m.py", f"""\
        # fine: a segment object holds pending jobs
        # bad: the segment objects ({ISSUE} 20)
        # bad: since {ISSUE}s #19 and 20
        # fine: a citation (arrow-rs {ISSUE} 4879, apache/spark {ISSUE} 1)
        """)
    problems = refcheck.issue_number_problems(tmp_path / "m.py", tmp_path)
    assert [(p.line, p.message) for p in problems] == [
        (2, f"'{ISSUE} 20': say the reason, not the issue"),
        (3, f"'since {ISSUE}s #19': say the reason, not the issue"),
    ]


def test_main_prints_each_problem_and_fails(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(refcheck, "all_problems",
                        lambda: [refcheck.Problem("docs/a.md", 3, "link 'c.md': no file")])
    assert refcheck.main() == 1
    assert capsys.readouterr().out.splitlines() == ["docs/a.md:3: link 'c.md': no file",
                                                    "1 broken reference(s)"]
    monkeypatch.setattr(refcheck, "all_problems", lambda: [])
    assert refcheck.main() == 0
