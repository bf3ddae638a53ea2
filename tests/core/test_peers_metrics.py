"""The quality figures of the peer benchmark (tests/benchmarks/bench_peers.py), without a model:
terms, headings of plain text, Markdown and the Jargon File, heading and part coverage, needles
planted whole at seeded paragraph ends and found again in prompts and summaries."""

from __future__ import annotations

import pytest

from app.core.paths import sample_document
from tests.benchmarks import bench_peers
from tests.benchmarks import peers_quality as q
from tests.benchmarks.bench_peers import Document, Run
from tests.benchmarks.report import Row

pytestmark = pytest.mark.unit


# ----- terms ----------------------------------------------------------------------------------


def test_terms_are_stemmed_content_words():
    assert q.terms("The hackers were hacking their Hacks in 1970") == ["hacker", "hack", "hack"]


def test_terms_drop_the_pipelines_own_words():
    # an echo of "Write a concise summary of the following document" says nothing of the text
    assert q.terms("A concise summary of the following document: this part summarizes") == []


# ----- headings --------------------------------------------------------------------------------

PLAIN = """\
                      The Handbook

   This paragraph opens the handbook and runs over more than one line so
   that it reads as body text.

   Table of Contents

   First Steps

   Further Reading

Chapter 1. First Steps

   The first chapter has body text that runs over two lines, as body text
   does in a plain-text book.

   “A quotation standing alone”

   More body text follows the quotation and it also runs over two lines,
   like the paragraph before it.

   and a lower-case phrase

   Yet more body text after the phrase, long enough to count as a body paragraph.

   :angry fruit salad: n.

   A bad visual-interface design that uses too many colors.
"""


def titles(text: str) -> list[str]:
    return [h.title for h in q.headings(text)]


def test_plain_text_headings():
    found = titles(PLAIN)
    # the centred title, the outdented chapter (numbering off), the headword; the table of
    # contents gives only its last line (followed by the chapter, which stands out left)
    assert found[0] == "The Handbook"
    assert "First Steps" in found
    assert "angry fruit salad" in found
    assert "Table of Contents" not in found
    assert not any("quotation" in t or "phrase" in t for t in found)


def test_headings_point_at_their_lines():
    for h in q.headings(PLAIN):
        line = PLAIN[h.start :].split("\n", 1)[0]
        assert h.title in line


def test_markdown_headings():
    text = "# Intro\n\nSome text.\n\n## Set-up steps ##\ntext\n\nOther Part\n----------\n\nbody\n"
    assert titles(text) == ["Intro", "Set-up steps", "Other Part"]


def test_a_signature_dash_is_no_heading():
    assert titles("#include <disclaimer.h>\n--\n  == Frank\n") == []


def test_headings_are_kept_once():
    text = "# Usage\n\nbody\n\n# Usage\n\nbody again\n"
    assert titles(text) == ["Usage"]


def test_jargon_file_headings(sample_text: str):
    heads = q.headings(q.cut(sample_text, 200_000))
    found = {h.title for h in heads}
    assert {"Hacker Writing Style", "Verb Doubling", "Revision History", "angry fruit salad"} \
        <= found  # fmt: skip
    # the glossary's index lists headwords one per line: they are not headings of the cut
    assert "zorch" not in found and "Zen" not in found
    assert 50 <= len(heads) <= 200


def test_heading_coverage_counts_headings_with_a_key_term_said():
    heads = q.headings("# Verb Doubling\n\nbody\n\n# Soundalike Slang\n\nbody\n\n# 404\n\nbody\n")
    assert q.heading_coverage(heads, "Hackers double verbs.") == (1, 2)  # 404 has no terms
    assert q.heading_coverage(heads, "It is about slang and doubling.") == (2, 2)
    assert q.heading_coverage(heads, "Nothing related.") == (0, 2)


# ----- parts -----------------------------------------------------------------------------------


def test_parts_cut_at_paragraph_ends_and_add_up(sample_text: str):
    text = sample_text[400_000:460_000]  # lexicon entries: many paragraph ends
    parts = q.split_parts(text, 10)
    assert len(parts) == 10
    assert "".join(parts) == text
    for p in parts[1:]:
        assert p.startswith("\n")  # each cut is at a paragraph's end
    sizes = [len(p) for p in parts]
    assert max(sizes) < 1.5 * min(sizes)


def test_part_key_terms_are_specific_to_their_part():
    paras = [f"common words here. {w} {w} {w} and {w}s again." for w in
             ("zebra", "otter", "moose", "camel")]  # fmt: skip
    keys = q.part_key_terms("\n\n".join(paras), k=4, top=3)
    assert [k[0] for k in keys] == ["zebra", "otter", "moos", "camel"]
    assert all("common" not in k and "word" not in k for k in keys)  # in every part: score 0


def test_part_coverage():
    keys = [["zebra"], ["walrus", "tusk"], ["mongoos"]]
    assert q.part_coverage(keys, "Walruses have tusks; mongooses do not.") == (2, 3)
    assert q.part_coverage(keys, "") == (0, 3)


# ----- needles ---------------------------------------------------------------------------------


def test_plant_puts_each_fact_whole_at_a_paragraph_end(sample_text: str):
    text = q.cut(sample_text, 30_000)
    needles = q.NEEDLES[:5]
    planted = q.plant(text, needles, seed=3)
    assert len(planted.text) == len(text) + sum(len(n.fact) + 2 for n in needles)
    for n, (a, b) in zip(needles, planted.spans, strict=True):
        assert planted.text[a:b] == n.fact
        assert planted.text[a - 2 : a] == "\n\n"  # a paragraph of its own
        assert planted.text[b : b + 1] == "\n"
    # the text around the needles is the text given, in order
    rest = planted.text
    for n in needles:
        rest = rest.replace("\n\n" + n.fact, "", 1)
    assert rest == text
    depths = sorted(a for a, _ in planted.spans)
    assert depths[0] > 0.02 * len(text) and depths[-1] < 0.98 * len(planted.text)


def test_plant_is_seeded(sample_text: str):
    text = q.cut(sample_text, 30_000)
    a, b, c = (q.plant(text, q.NEEDLES[:5], seed=s) for s in (1, 1, 2))
    assert a == b
    assert a.spans != c.spans


def test_plant_refuses_a_key_word_the_text_holds():
    with pytest.raises(ValueError, match="ombrine"):
        q.plant("The Ombrine is here.\n\nMore.\n\nEnd.", q.NEEDLES[:1], seed=0)
    with pytest.raises(ValueError, match="paragraph ends"):
        q.plant("one paragraph only", q.NEEDLES[:2], seed=0)


def test_needles_reached_only_whole():
    fact = q.NEEDLES[0].fact
    half = fact[: len(fact) // 2]
    rewrapped = fact.replace(" ", "\n   ", 2)
    assert q.reached(q.NEEDLES[:1], [f"before {rewrapped} after"]) == [True]
    assert q.reached(q.NEEDLES[:1], [f"x {half}", fact[len(fact) // 2 :]]) == [False]
    assert q.reached(q.NEEDLES[:2], []) == [False, False]


def test_texts_of_ranges_join_a_steps_neighbours_only():
    text = "alpha beta\n\ngamma delta\n\nepsilon"
    ranges = [("part 1", 0, 10), ("part 1", 12, 23), ("part 2", 25, 32)]
    assert q.texts_of_ranges(text, ranges) == ["alpha beta\n\ngamma delta", "epsilon"]
    # the same ranges in two steps are two prompts
    assert q.texts_of_ranges(text, [("a", 0, 10), ("b", 12, 23)]) == ["alpha beta",
                                                                      "gamma delta"]  # fmt: skip


def test_needle_key_words_in_the_summary():
    needles = q.NEEDLES[:4]
    summary = "It mentions OMBRINE dye, the Dunmarra-wink and Kestrine monks, but no loaves."
    assert q.in_summary(needles, summary) == [True, True, True, False]
    assert q.in_summary(needles, "The Kestrines brew ale.") == [False, False, False, False]


def test_cut_ends_on_a_paragraph_within_the_size(sample_text: str):
    text = q.cut(sample_text, 20_000)
    assert len(text.encode("utf-8")) <= 20_000
    assert sample_text.startswith(text)
    assert sample_text[len(text) :].startswith("\n")
    assert text[-1].strip()
    assert len(text.encode("utf-8")) > 18_000
    assert q.cut("short\n\ntext", 1_000) == "short\n\ntext"


# ----- the goal rows ---------------------------------------------------------------------------


def goal_rows(runs: list[Run], tokens: int = 1_000) -> list[Row]:
    doc = Document("cut", sample_document(), q.Planted("", (), ()), tokens, 900, 800, [], [])
    return bench_peers.goal_rows(runs, doc, "", "note")


def run(name: str, wall: float, covered: int, evaluated: int = 1_000,
        error: str | None = None) -> Run:  # fmt: skip
    return Run(name, "cut", error=error, wall_s=wall, parts=(covered, 10),
               prompt_tokens_evaluated=evaluated)  # fmt: skip


def test_speed_goal_takes_the_fastest_contextlens_pipeline_at_equal_coverage():
    rows = goal_rows([run("langchain-map-reduce", 100, 3), run("langchain-refine", 90, 4),
                      run("contextlens-map-reduce", 50, 5),
                      run("contextlens-rolling", 30, 2)])  # fmt: skip
    speed = rows[0]
    assert speed["baseline"].startswith("langchain-refine")  # the fastest peer
    assert speed["value"] == 50  # rolling is faster but covers less than the peer
    assert speed["ratio"] == pytest.approx(1.8)
    assert speed["met"]


def test_speed_goal_is_missed_on_coverage_even_when_faster():
    rows = goal_rows([run("langchain-refine", 90, 4), run("contextlens-rolling", 30, 2)])
    speed = rows[0]
    assert speed["ratio"] == pytest.approx(3.0)
    assert not speed["met"]
    assert "coverage" in speed["why"]


def test_failed_pipelines_are_left_out_of_the_goals():
    rows = goal_rows([run("langchain-refine", 10, 9, error="boom"),
                      run("langchain-map-reduce", 100, 1), run("contextlens-rolling", 40, 1,
                                                                   evaluated=1_250)])  # fmt: skip
    speed, rolling = rows
    assert speed["baseline"].startswith("langchain-map-reduce")
    assert speed["met"]
    assert rolling["ratio"] == pytest.approx(1.25)
    assert not rolling["met"] and "1,250" in rolling["why"]
