"""The home page (docs/index.md) tells the same story as the README and the guide.

A first-time reader decides from the home page whether proletarian-di fits; a home
page that forgets a feature, or says in "When not to use it" that a feature is
missing, sends them elsewhere for something the project has.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
HOME = ROOT / "docs" / "index.md"

# What earlier home pages said was missing, though the guide documents it: the feature,
# the page (and anchor) documenting it, and the phrases that deny it.
DENIALS = [
    (
        "periodic jobs",
        "periodic.md",
        r"\b(no|without|lacks?|nor)\b[^.]*\b(periodic|cron)\b|\bwant[^.]*\bperiodic\b",
    ),
    (
        "long jobs without an open transaction (lease mode)",
        "workers.md#lease-mode",
        r"\bsplit (them|it|the jobs?)\b|\bmust not hold a transaction\b"
        r"|\bjobs? of hours keeps?\b",
    ),
    (
        "async handlers",
        "workers.md#async-handlers",
        r"\bplain functions\b|\bonly (sync|synchronous|plain)\b"
        r"|\b(no|without) (async|asyncio|coroutine)|\basyncio handlers\b|\bare coroutines\b",
    ),
    ("unique jobs", "unique-jobs.md", r"\b(no|without) (\w+ ){0,3}unique\b"),
    ("priorities", "priorities.md", r"\b(no|without) (\w+ ){0,3}priorit"),
    ("pausing a queue", "queues.md", r"\b(no|without) (\w+ ){0,3}paus"),
    ("a dashboard", "observability.md#the-dashboard", r"\b(no|without) (\w+ ){0,3}dashboard\b"),
    ("metrics", "observability.md#metrics", r"\b(no|without) (\w+ ){0,3}metrics\b"),
    (
        "rate limits",
        "queues.md#at-most-n-starts-a-period-rate_limit",
        r"\b(no|without) (\w+ ){0,3}rate limit|\bneed (\w+ ){0,3}rate limits?\b"
        r"|\boffer more \([^)]*rate limits",
    ),
    ("fair shares", "queues.md#fair-shares-fair", r"\b(no|without) (\w+ ){0,3}fair"),
    ("snooze and cancel from a job", "flow-control.md", r"\b(no|without) (\w+ ){0,3}snooz"),
    (
        "jobs that wait for other jobs (workflows)",
        "workflows.md",
        r"\b(no|without) (\w+ ){0,3}(chains|chords|dependencies|depends)\b"
        r"|\ba job for celery\b|\bcanvases\b",
    ),
    (
        "Transit payloads shared with Clojure",
        "clojure.md",
        r"\bjson only\b|\b(no|without) (\w+ ){0,3}transit\b",
    ),
]


def readme_features() -> list[str]:
    """The bold names of the README's feature list (the bullets before the first heading)."""
    text = README.read_text(encoding="utf-8")
    intro = text.split("\n## ", 1)[0]
    features = re.findall(r"^- \*\*(.+?)\*\*", intro, flags=re.M)
    assert len(features) >= 10, f"the README's feature list was not found: {features}"
    return [feature.rstrip(".:").strip() for feature in features]


def home_text() -> str:
    return HOME.read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"docs/index.md has no section {title!r}"
    return match.group(1)


def normalized(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("*", "").replace("`", "")).lower()


def test_home_names_every_readme_feature() -> None:
    home = normalized(home_text())
    missing = [f for f in readme_features() if normalized(f) not in home]
    assert not missing, f"docs/index.md does not name these README features: {missing}"


def test_the_documented_features_exist() -> None:
    for _, target, _ in DENIALS:
        page, _, anchor = target.partition("#")
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        if anchor:
            headings = [
                re.sub(r"[^\w\s-]", "", h).strip().lower().replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", text, flags=re.M)
            ]
            assert anchor in headings, f"docs/{page} has no section #{anchor}"


def sentences(text: str) -> list[str]:
    """The sentences of a section, each bullet and paragraph split on its own."""
    found = []
    for chunk in re.split(r"\n\s*\n|\n(?=- )", text):
        flat = re.sub(r"\s+", " ", chunk).strip().removeprefix("- ")
        found += [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*(])", flat) if s.strip()]
    return found


def test_when_not_to_use_it_denies_no_existing_feature() -> None:
    limits = sentences(section(home_text(), "When not to use it"))
    for feature, page, pattern in DENIALS:
        for sentence in limits:
            assert not re.search(pattern, sentence, flags=re.I), (
                f'docs/index.md "When not to use it" denies {feature}, which exists '
                f"(docs/{page}): {sentence!r}"
            )


def test_comparisons_send_no_one_elsewhere_for_an_existing_feature() -> None:
    comparisons = section(home_text(), "Compared with the alternatives")
    choose = [s for s in sentences(comparisons) if re.match(r"\**choose\b", s, flags=re.I)]
    assert len(choose) >= 3, f"no 'Choose …' advice found in the comparisons: {choose}"
    for feature, page, pattern in DENIALS:
        for sentence in choose:
            words = normalized(sentence)
            assert not re.search(pattern, words, flags=re.I), (
                f"docs/index.md sends readers elsewhere for {feature}, which exists "
                f"(docs/{page}): {sentence!r}"
            )
            for keyword in ("periodic", "cron", "long jobs", "priorit", "unique", "dashboard"):
                assert keyword not in words, (
                    f"docs/index.md sends readers elsewhere for {keyword!r}, which proletarian-di "
                    f"has: {sentence!r}"
                )


def test_home_links_the_pages_of_the_features_it_once_denied() -> None:
    home = home_text()
    for feature, target, _ in DENIALS[:3]:
        assert f"({target})" in home, f"docs/index.md does not link {target} ({feature})"
