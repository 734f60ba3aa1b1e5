"""The documentation is real: the configuration reference loads and shows the defaults, and every
relative link in the README and the docs/ pages leads to a file (and heading) that exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msgspec
import pytest

from gateway.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text outside fenced code blocks (where `#` lines are comments, not headings)."""
    return _FENCE.sub("", text)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    slugs: set[str] = set()
    for heading in _HEADING.findall(_prose(page.read_text())):
        slug, n = _slug(heading), 1
        while slug in slugs:  # GitHub numbers repeated headings: x, x-1, x-2
            slug, n = f"{_slug(heading)}-{n}", n + 1
        slugs.add(slug)
    return slugs


def _local_links(page: Path) -> list[str]:
    text = _CODE_SPAN.sub("", _prose(page.read_text()))
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


def _broken(page: Path, target: str) -> str | None:
    """Why a link from ``page`` to ``target`` leads nowhere, or None when it resolves."""
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if ROOT not in (dest, *dest.parents):
        return f"{target}: outside the repository"
    if not dest.exists():
        return f"{target}: no such file or folder"
    if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
        return f"{target}: {dest.relative_to(ROOT)} has no heading #{anchor}"
    return None


def _reference() -> str:
    blocks = re.findall(r"```toml\n(.*?)```", (DOCS / "configuration.md").read_text(), re.S)
    assert len(blocks) == 1  # one reference, not several partial ones
    return str(blocks[0])


def _setting_paths(tree: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(tree, dict) and tree:
        return [p for key, value in tree.items() for p in _setting_paths(value, (*prefix, key))]
    return [] if tree is None else [prefix]  # TOML has no null: a setting unset by default is a comment


def test_the_configuration_reference_loads_and_shows_the_defaults(tmp_path: Path) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(_reference())
    documented = load_settings(config, environ={})  # unknown settings would raise
    defaults = load_settings(environ={})
    assert msgspec.to_builtins(documented) == msgspec.to_builtins(defaults)
    assert tomllib.loads(_reference())  # and it is plain TOML


def test_the_configuration_reference_names_every_setting() -> None:
    shown = tomllib.loads(_reference())
    defaults = msgspec.to_builtins(load_settings(environ={}))

    def documented(path: tuple[str, ...]) -> bool:
        node: object = shown
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        return True

    assert [".".join(p) for p in _setting_paths(defaults) if not documented(p)] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = [why for target in _local_links(page) if (why := _broken(page, target))]
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_docs_page() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _local_links(README)}
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked] == []


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    page = DOCS / "architecture.md"
    assert _broken(page, "routing.md#policies") is None
    assert _broken(page, "../README.md#read-next") is None
    assert _broken(page, "no-such-page.md") is not None
    assert _broken(page, "routing.md#no-such-heading") is not None
    assert _broken(page, "../../outside.md") is not None
    sample = tmp_path / "sample.md"
    sample.write_text('[a](x.md) `[b](y.md)` ![c](z.png "t")\n```\n[d](w.md)\n# not a heading\n```\n')
    assert _local_links(sample) == ["x.md", "z.png"]
