"""The reasons a plan gives for each span, in the window's language.

The planner (core, no Qt) writes each span's reason in English, with its figures in it; those
reasons are also what the command line prints and the history keeps. The window matches each
against the planner's sentence shapes below and shows the translation with the same figures; a
reason of another shape is shown as it is. tests/ui/test_plan_reasons.py plans real documents
with every strategy and checks that each reason they give has its shape here.
"""

from __future__ import annotations

import re

from PySide6.QtCore import QCoreApplication

from app.ui.i18n import QT_TRANSLATE_NOOP

_N = r"([\d,]+)"  # a figure as the planner writes it (1,755), kept as written
_P = r"(\d+%)"
_F = r"(\d+\.\d+)"  # a score (12.41)
_WORDS = r"'[^']+'(?:, '[^']+')*"  # the question's words a sentence holds: 'lantern', 'forged'
SHAPES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(f"^{pattern}$"), template)
    for pattern, template in (
        ("fits the budget", QT_TRANSLATE_NOOP("PlanReason", "fits the budget")),
        (f"the document's chunks need {_N} tokens; the budget is {_N}",
         QT_TRANSLATE_NOOP("PlanReason",
                           "the document's chunks need {0} tokens; the budget is {1}")),
        (f"after the first {_N} tokens \\(head\\)",
         QT_TRANSLATE_NOOP("PlanReason", "after the first {0} tokens (head)")),
        ("the start of the document", QT_TRANSLATE_NOOP("PlanReason", "the start of the document")),
        (f"before the last {_N} tokens \\(tail\\)",
         QT_TRANSLATE_NOOP("PlanReason", "before the last {0} tokens (tail)")),
        ("the end of the document", QT_TRANSLATE_NOOP("PlanReason", "the end of the document")),
        ("the middle of the document, dropped to keep its start and end",
         QT_TRANSLATE_NOOP("PlanReason",
                           "the middle of the document, dropped to keep its start and end")),
        ("the start or end of the document",
         QT_TRANSLATE_NOOP("PlanReason", "the start or end of the document")),
        ("passes through the rolling window",
         QT_TRANSLATE_NOOP("PlanReason", "passes through the rolling window")),
        ("in a sliding window over semantic chunks",
         QT_TRANSLATE_NOOP("PlanReason", "in a sliding window over semantic chunks")),
        ("mapped in its own pass, then reduced",
         QT_TRANSLATE_NOOP("PlanReason", "mapped in its own pass, then reduced")),
        ("more informative than what was dropped",
         QT_TRANSLATE_NOOP("PlanReason", "more informative than what was dropped")),
        ("whitespace only", QT_TRANSLATE_NOOP("PlanReason", "whitespace only")),
        (f"boilerplate: the same line recurs {_N} times",
         QT_TRANSLATE_NOOP("PlanReason", "boilerplate: the same line recurs {0} times")),
        (f"repeats the text at characters {_N}–{_N}",
         QT_TRANSLATE_NOOP("PlanReason", "repeats the text at characters {0}–{1}")),
        (f"mostly whitespace \\({_P}\\)",
         QT_TRANSLATE_NOOP("PlanReason", "mostly whitespace ({0})")),
        (f"low information: {_P} new after compression",
         QT_TRANSLATE_NOOP("PlanReason", "low information: {0} new after compression")),
        (f"nothing of the document fits: the budget is {_N} tokens",
         QT_TRANSLATE_NOOP("PlanReason", "nothing of the document fits: the budget is {0} tokens")),
        (f"rank {_N} of {_N} matching parts \\(score {_F}; terms: (.+)\\)",
         QT_TRANSLATE_NOOP("PlanReason",
                           "rank {0} of {1} matching parts (score {2}; terms: {3})")),
        (f"rank {_N} of {_N} matching parts \\(score {_F}\\), past the budget",
         QT_TRANSLATE_NOOP("PlanReason",
                           "rank {0} of {1} matching parts (score {2}), past the budget")),
        (f"the paragraph of the part ranked {_N} goes on here",
         QT_TRANSLATE_NOOP("PlanReason", "the paragraph of the part ranked {0} goes on here")),
        (f"rank {_N} of {_N} matching parts \\(score {_F}\\), under 70% of the best \\({_F}\\)",
         QT_TRANSLATE_NOOP("PlanReason", "rank {0} of {1} matching parts (score {2}), under 70% "
                                         "of the best ({3})")),
        (f"rank {_N} of {_N} matching parts \\(score {_F}\\), after the {_N} best kept",
         QT_TRANSLATE_NOOP("PlanReason",
                           "rank {0} of {1} matching parts (score {2}), after the {3} best kept")),
        (f"next to the part ranked {_N} \\(context\\)",
         QT_TRANSLATE_NOOP("PlanReason", "next to the part ranked {0} (context)")),
        ("matches no term of the question",
         QT_TRANSLATE_NOOP("PlanReason", "matches no term of the question")),
        ("retrieve needs a question to rank the document against: ask a question, or extract "
         "with an instruction",
         QT_TRANSLATE_NOOP("PlanReason", "retrieve needs a question to rank the document "
                                         "against: ask a question, or extract with an "
                                         "instruction")),
        (f"a single character here needs {_N} tokens, over the budget",
         QT_TRANSLATE_NOOP("PlanReason",
                           "a single character here needs {0} tokens, over the budget")),
        # retrieve's sentence-precise context: a match's sentences and those they lean on
        (f"sentence {_N} of the part ranked {_N} \\(score {_F}\\): holds ({_WORDS})",
         QT_TRANSLATE_NOOP("PlanReason",
                           "sentence {0} of the part ranked {1} (score {2}): holds {3}")),
        (f"sentence {_N} of the part ranked {_N} \\(score {_F}\\): holds ({_WORDS}); "
         f"the question asks about ({_WORDS}) \\(in {_N} of the parts\\)",
         QT_TRANSLATE_NOOP("PlanReason", "sentence {0} of the part ranked {1} (score {2}): "
                                         "holds {3}; the question asks about {4} (in {5} of the "
                                         "parts)")),
        (f"sentence {_N} of the part ranked {_N} \\(score {_F}\\): holds ({_WORDS}); "
         f"the question's rarest: ({_WORDS}) \\(in {_N} of the parts\\)",
         QT_TRANSLATE_NOOP("PlanReason", "sentence {0} of the part ranked {1} (score {2}): "
                                         "holds {3}; the question's rarest: {4} (in {5} of the "
                                         "parts)")),
        (f"the sentence before, for the part ranked {_N}: the next starts with '(\\w+)'",
         QT_TRANSLATE_NOOP("PlanReason",
                           "the sentence before, for the part ranked {0}: the next starts with "
                           "'{1}'")),
        (f"the sentence after, for the part ranked {_N}: the one before it ends in a colon "
         "\\(what it introduces follows\\)",
         QT_TRANSLATE_NOOP("PlanReason", "the sentence after, for the part ranked {0}: the one "
                                         "before it ends in a colon (what it introduces "
                                         "follows)")),
        (f"the sentence after, for the part ranked {_N}: the one before it reads as a heading",
         QT_TRANSLATE_NOOP("PlanReason", "the sentence after, for the part ranked {0}: the one "
                                         "before it reads as a heading")),
        (f"the sentence after, for the part ranked {_N}: it starts with '(\\w+)'",
         QT_TRANSLATE_NOOP("PlanReason",
                           "the sentence after, for the part ranked {0}: it starts with '{1}'")),
        (f"the text under the heading ranked {_N} starts here",
         QT_TRANSLATE_NOOP("PlanReason", "the text under the heading ranked {0} starts here")),
        (f"the rest of the part ranked {_N}: no sentence here scores 50% of its best",
         QT_TRANSLATE_NOOP("PlanReason",
                           "the rest of the part ranked {0}: no sentence here scores 50% of its "
                           "best")),
        (f"rank {_N} of {_N} matching parts \\(score {_F}\\): no sentence names ({_WORDS}) "
         "\\(what the question asks about\\)",
         QT_TRANSLATE_NOOP("PlanReason", "rank {0} of {1} matching parts (score {2}): no "
                                         "sentence names {3} (what the question asks about)")),
        (f"rank {_N} of {_N} matching parts \\(score {_F}\\): no sentence holds ({_WORDS}) "
         "\\(the question's rarest\\) or two of its words",
         QT_TRANSLATE_NOOP("PlanReason", "rank {0} of {1} matching parts (score {2}): no "
                                         "sentence holds {3} (the question's rarest) or two of "
                                         "its words")),
        (f"rank {_N} of {_N} matching parts \\(score {_F}\\): no sentence holds the question's "
         "words",
         QT_TRANSLATE_NOOP("PlanReason", "rank {0} of {1} matching parts (score {2}): no "
                                         "sentence holds the question's words")),
        ("blank space before the first excerpt",
         QT_TRANSLATE_NOOP("PlanReason", "blank space before the first excerpt")),
    )
)  # fmt: skip


def shape_of(reason: str) -> str | None:
    """The English template ``reason`` was written from, or None."""
    for pattern, template in SHAPES:
        if pattern.match(reason):
            return template
    return None


def reason_label(reason: str) -> str:
    """``reason`` in the window's language, its figures unchanged."""
    for pattern, template in SHAPES:
        if found := pattern.match(reason):
            return QCoreApplication.translate("PlanReason", template).format(*found.groups())
    return reason
