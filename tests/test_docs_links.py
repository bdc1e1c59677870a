"""Every link in README.md and docs/*.md leads to a file of this repository.

A relative link must name a file (or folder) inside the repository, and a ``#anchor`` must
name a heading of its target as GitHub slugs it. No link may leave the repository: a path
that climbs out of it, an absolute path or a ``file:`` URL would resolve only on the machine
it was written on. Web addresses (``http``, ``https``, ``mailto``) are not files and are left
alone. Links inside code blocks and code spans are text, not links.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]"  # [text], which may hold one level of brackets
    r"\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"  # (target "optional title")
)
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_WEB = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, with their line numbers."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def links_of(page: Path) -> list[Link]:
    found = []
    for number, raw in prose_lines(page.read_text()):
        line = _CODE_SPAN.sub("", raw)
        targets = [m.group(1) for m in _INLINE_LINK.finditer(line)]
        definition = _REFERENCE_DEFINITION.match(line)
        if definition:
            targets.append(definition.group(1))
        found += [Link(page, number, target) for target in targets]
    return found


def github_anchor(heading: str) -> str:
    """GitHub's slug of a heading: markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    """Every heading's anchor; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    anchors = set()
    for _, line in prose_lines(page.read_text()):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = github_anchor(heading.group(2))
        anchors.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return anchors


def problem(link: Link, root: Path) -> str | None:
    """Why the link does not resolve inside ``root``, or None when it does."""
    target = link.target
    if not target or _WEB.match(target):
        return None if target else "empty link"
    if _SCHEME.match(target) or target.startswith(("/", "\\")):
        return "leaves the repository (an absolute path or URL that is not a web address)"
    path_part, _, anchor = target.partition("#")
    destination = (link.page.parent / path_part).resolve() if path_part else link.page
    if not destination.is_relative_to(root.resolve()):
        return "leaves the repository"
    if not destination.exists():
        return "names no file of the repository"
    if anchor and (destination.suffix != ".md" or anchor not in anchors_of(destination)):
        return f"#{anchor} is no heading of {destination.relative_to(root.resolve())}"
    return None


def problems_in(root: Path) -> list[str]:
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    found = []
    for page in pages:
        for link in links_of(page):
            why = problem(link, root)
            if why:
                where = f"{link.page.relative_to(root)}:{link.line}"
                found.append(f"{where}: ({link.target}) {why}")
    return found


# --- The repository's pages ----------------------------------------------------------------


def test_every_link_of_the_readme_and_the_docs_resolves_inside_the_repository() -> None:
    assert problems_in(REPO) == []


def test_the_readme_links_to_the_design_and_adoption_pages() -> None:
    targets = {link.target for link in links_of(REPO / "README.md")}
    assert {"docs/design.md", "docs/adopting.md"} <= targets


# --- The checker itself, on pages made to break it -----------------------------------------


def write(root: Path, name: str, text: str) -> None:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)


def test_the_checker_reports_each_kind_of_broken_link(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo, "docs/guide.md", "# Guide\n\n## Step one (`make demo`)\n")
    write(tmp_path, "outside.md", "# Outside\n")
    write(
        repo,
        "README.md",
        "\n".join(
            [
                "[design](../outside.md)",
                "[missing](docs/missing.md)",
                "[anchor](docs/guide.md#step-two)",
                "[absolute](/etc/hosts)",
                "[file url](file:///etc/hosts)",
                "[fine](docs/guide.md#step-one-make-demo)",
                "[web](https://learn.microsoft.com/azure/)",
                "`[in code](docs/nowhere.md)`",
                "```",
                "[in a block](docs/nowhere.md)",
                "```",
                "[ref]: docs/gone.md",
            ]
        ),
    )

    found = problems_in(repo)

    assert [line.split(" ", 1)[0] for line in found] == [
        "README.md:1:",
        "README.md:2:",
        "README.md:3:",
        "README.md:4:",
        "README.md:5:",
        "README.md:12:",
    ]
    assert "leaves the repository" in found[0]
    assert "names no file" in found[1]
    assert "#step-two is no heading of docs/guide.md" in found[2]


def test_anchors_follow_github_s_rules() -> None:
    assert github_anchor("3. The receive pipeline (token mode)") == (
        "3-the-receive-pipeline-token-mode"
    )
    assert github_anchor("The local host (`python -m lab.host`)") == (
        "the-local-host-python--m-labhost"
    )
    assert github_anchor("Upgrading: scoped idempotency keys (`BUS_INGRESS_KEY_SCOPES`)") == (
        "upgrading-scoped-idempotency-keys-bus_ingress_key_scopes"
    )


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path: Path) -> None:
    write(tmp_path, "page.md", "# Notes\n\n## Setup\n\n## Setup\n\n```\n# Setup\n```\n")
    assert anchors_of(tmp_path / "page.md") == {"notes", "setup", "setup-1"}
