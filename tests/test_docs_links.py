"""The front door holds: README.md is short, opens with the two commands CI runs, reaches every doc, and no
relative link in README.md or docs/ points at a file or heading that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 150

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link in a code sample is not a link)."""
    return _FENCE.sub("", text)


def _links(path: Path) -> list[str]:
    return _LINK.findall(_prose(path.read_text()))


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated heading numbered -1, -2..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_prose(path.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a linked heading keeps its text
        slug = "".join(ch for ch in text.lower() if ch.isalnum() or ch in " -_").replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _broken(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in _links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto:: not checked offline
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{path.relative_to(root)}: {target} (no heading #{anchor} in {dest.name})")
    return broken


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the front door keeps ≤ 150"
    first_block = README.read_text().split("```")[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ci_commands = [line.split("#")[0].strip() for line in ci]
    assert "make test" in ci_commands, ".ci/run no longer runs `make test`"
    # `make test` leaves the tests marked slow to `make test-slow`: CI runs both, so every test runs there.
    assert "make test-slow" in ci_commands, ".ci/run no longer runs `make test-slow`"


def test_every_doc_is_linked_from_the_readme() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _links(README)}
    missing = sorted(p.name for p in DOCS.glob("*.md") if p.resolve() not in linked)
    assert not missing, f"docs not linked from README.md's index: {', '.join(missing)}"


def test_every_relative_link_resolves() -> None:
    broken = [b for path in [README, *sorted(DOCS.glob("*.md"))] for b in _broken(path)]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_link_checker_sees_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    # The checks above pass on a repository without links too; this one proves they look.
    doc = tmp_path / "a.md"
    doc.write_text(
        "# Title: with `code`, (parens)\n\n## Twice\n## Twice\n\n[x](b.md) [y](a.md#nope) [z](#twice-1)\n"
    )
    assert _anchors(doc) == {"title-with-code-parens", "twice", "twice-1"}
    assert _broken(doc, tmp_path) == [
        "a.md: b.md (no such file)",
        "a.md: a.md#nope (no heading #nope in a.md)",
    ]
