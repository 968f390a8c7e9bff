"""A fresh venv's dependencies linked from this one instead of installed: the
README test's short variant (tests/e2e/test_readme_fresh_venv.py).

A wheel's requirements (with its extras) are followed through this interpreter's
installed distributions (their ``Requires-Dist``, markers evaluated here), and
each distribution of that closure, no other, is made visible to the new venv by
a symlink of each of its top-level files and directories (its ``.dist-info``
included) in one directory a ``.pth`` file of the venv names. So the venv sees
exactly what a pip install of the wheel would bring (at this environment's
versions), without the minutes of unpacking pyspark, pyarrow and pandas: a
module the wheel imports but does not require is still missing there.
"""

from __future__ import annotations

import importlib.metadata as md
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(requirements: list[str], extras: set[str]) -> dict[str, md.Distribution]:
    """The installed distributions ``requirements`` (``Requires-Dist`` lines, as
    read with ``extras`` requested) need, by canonical name, each followed through
    its own requirements. Raises ``PackageNotFoundError`` for a needed distribution
    that is not installed here."""
    found: dict[str, md.Distribution] = {}
    todo = [(Requirement(line), extras) for line in requirements]
    while todo:
        req, wanted = todo.pop()
        if req.marker is not None and not any(
                req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
            continue
        name = canonicalize_name(req.name)
        dist = found.get(name)
        if dist is None:
            dist = found[name] = md.distribution(req.name)
            todo += [(Requirement(line), set(req.extras)) for line in dist.requires or ()]
        elif req.extras:  # (extras asked later still pull their requirements)
            todo += [(r, set(req.extras)) for r in map(Requirement, dist.requires or ())
                     if r.marker is not None and "extra" in str(r.marker)]
    return found


def top_level(dist: md.Distribution) -> set[Path]:
    """The top-level files and directories of ``dist`` in its site directory (its
    modules, packages, data directories and ``.dist-info``), as absolute paths;
    scripts installed outside it and the shared top-level ``__pycache__`` are
    left out."""
    site = Path(str(dist.locate_file(""))).resolve()
    out = set()
    for file in dist.files or ():
        parts = Path(file).parts
        if parts and parts[0] not in ("..", "__pycache__"):
            out.add(site / parts[0])
    return out


def link_closure(venv: Path, requirements: list[str], extras: set[str]) -> list[str]:
    """Make the closure of ``requirements`` (see :func:`closure`) importable in
    ``venv``: symlinks in ``venv/linked-deps``, named by a ``.pth`` file in its
    site-packages. Returns the distributions' canonical names, sorted."""
    dists = closure(requirements, extras)
    target = venv / "linked-deps"
    target.mkdir()
    for dist in dists.values():
        for path in top_level(dist):
            if path.exists() and not (target / path.name).exists():
                (target / path.name).symlink_to(path)
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    (Path(purelib) / "linked_deps.pth").write_text(f"{target}\n", encoding="utf-8")
    return sorted(dists)


def wheel_requirements(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of ``wheel``'s metadata."""
    import zipfile
    from email.parser import Parser

    with zipfile.ZipFile(wheel) as zf:
        [meta] = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        headers = Parser().parsestr(zf.read(meta).decode("utf-8"))
    return headers.get_all("Requires-Dist") or []
