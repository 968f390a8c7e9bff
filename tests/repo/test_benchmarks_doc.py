"""Every figure of docs/benchmarks.md appears in a results file its section names, which
records the machine and was written by a command the page shows (the rules:
tests/support/doc_figures.py). Reads the markdown and the JSON files only."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.doc_figures import appears, sections, unsourced

ROOT = Path(__file__).resolve().parents[2]


def test_every_figure_of_the_benchmarks_page_is_in_the_results_file_it_names() -> None:
    problems = unsourced(ROOT / "docs" / "benchmarks.md", ROOT)
    assert not problems, "\n".join(problems)


def test_every_section_with_figures_names_its_results_file() -> None:
    page = sections((ROOT / "docs" / "benchmarks.md").read_text())
    with_figures = [s for s in page if s.figures]
    assert len(with_figures) >= 5, [s.heading for s in page]
    assert all(s.files for s in with_figures), [s.heading for s in with_figures if not s.files]


def test_figures_are_read_from_prose_and_tables_not_from_code() -> None:
    [intro, table] = sections(
        "Run `bench/x.py --rounds 3` on 2 cores, Python 3.11.7, p50 1k 6c6d5fb.\n"
        "```sh\n.venv/bin/python bench/x.py --rows 1000000\n```\n"
        "## Table\n\n| a | b |\n| --- | ---: |\n| 1,234,567 | 1.12x (rounds 0.40, 0.24) |\n"
        "from `bench/results/x.json`\n")
    assert (intro.figures, intro.versions, intro.files) == (["2"], ["3.11.7"], [])
    assert table.figures == ["1,234,567", "1.12", "0.40", "0.24"]
    assert table.files == ["bench/results/x.json"]


def test_a_figure_appears_only_as_its_rounding_of_a_number_in_the_file() -> None:
    numbers = [0.017469, 9834.4, 0.3731, 3051001.0, 592450.5, 64.0]
    for figure in ("17", "9,834", "0.37", "3.1", "592,500", "592,450", "64"):
        assert appears(figure, numbers), figure
    for figure in ("18", "9,835", "0.38", "3.2", "592,600", "65", "1,622"):
        assert not appears(figure, numbers), figure


def test_a_page_with_an_unsourced_figure_fails(tmp_path: Path) -> None:
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    record = {"command": ".venv/bin/python bench/x.py --rounds 3",
              "machine": {"cores": 2, "cpu_model": "AMD EPYC", "python": "3.11.7",
                          "pyspark": "4.3.0"},
              "load": {"at_start": [1.0, 1.0, 1.0]}, "figure_s": 0.0174}
    (results / "x.json").write_text(json.dumps(record))
    page = tmp_path / "page.md"
    page.write_text("# X\n\n```sh\n.venv/bin/python bench/x.py\n```\n\n## A\n\n"
                    "17 ms on 2 cores, Python 3.11.7 (`bench/results/x.json`)\n")
    assert unsourced(page, tmp_path) == []
    page.write_text(page.read_text() + "and 23 ms, Python 3.12.1\n")
    assert unsourced(page, tmp_path) == [
        "## A: 23 appears in none of ['bench/results/x.json']",
        "## A: version 3.12.1 appears in none of ['bench/results/x.json']"]
    page.write_text(page.read_text() + "\n## B\n\n45 ms\n")
    assert unsourced(page, tmp_path)[-1] == "## B: figures ['45'] but no bench/results file"
    del record["machine"]["cpu_model"]
    (results / "x.json").write_text(json.dumps(record))
    assert "## A: bench/results/x.json does not record ['cpu_model']" in unsourced(
        page, tmp_path)


def test_every_figure_of_a_chaos_run_is_in_the_results_file_its_section_names() -> None:
    # (docs/chaos.md also describes the runner with numbers of its own, its options'
    # defaults: a section that names no results file is not a measurement)
    problems = [p for p in unsourced(ROOT / "docs" / "chaos.md", ROOT)
                if not p.endswith("but no bench/results file")]
    assert not problems, "\n".join(problems)
    measured = [s for s in sections((ROOT / "docs" / "chaos.md").read_text()) if s.files]
    assert len(measured) >= 3, [s.heading for s in measured]
