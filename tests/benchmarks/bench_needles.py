"""Needles in a long document: which strategy keeps a planted fact, and does the model answer it.

Run with ``python tests/benchmarks/bench_needles.py [--needles 20] [--seed 0] [--n-ctx 2048]
[--tokens 400000] [--multi-pass] [--model PATH] [--only-multi-fact | --no-multi-fact] [--quick]
[--json PATH]`` (or ``make bench``). The Jargon File
sample (resources/samples), repeated or cut to ``--tokens`` tokens of the default model (counted
with the engine's exact counter), gets ``--needles`` invented facts ("needles"), each a paragraph
of its own at a seeded random depth (two near 300k tokens when the document is that long), each
with a distinctive value that the Jargon File does not hold. Each fact has a question that says it
in other words (the question shares at most half of its content words with the fact and no three
words in a row), and the value(s) that answer it.

For every strategy of ``app.core.planning.strategies.STRATEGIES``, each question is planned as an
``ask`` job plans it (``tasks.planning`` for the instruction and the reply reserve, ``plan_for``
for the budget the model's chat frame leaves in ``--n-ctx``):

- needle retention: the share of needles whose sentence lies whole in what reaches the model, the
  kept spans of a one-pass plan (adjacent spans joined) or one of the passes of a multi-pass plan
  (every chunk reaches the model there, in one pass or another);
- planning time: the first question (chunking, counting and, for ``retrieve``, building its
  index) against the later ones (``retrieve`` scores the cached index; the other strategies plan
  the same whatever is asked, so theirs come from the plan cache);
- answer accuracy: the share of needles whose value appears in the model's reply (case
  ignored), the job ``tasks.ask`` asking every question on the default model, greedy, with
  ``--max-tokens`` of reply. One-pass strategies run always; multi-pass ones (each question
  reads the whole document) only with ``--multi-pass``, else the tokens they would evaluate and
  the time that would take at the prompt and reply speeds measured here are printed.

With ``--fill``, `retrieve` also runs under its earlier rule (``retrieve-fill``: the budget
filled with further matches and their neighbours) beside the default (what scores close to the
best match, with its paragraph).

Multi-fact questions, reported apart (``--only-multi-fact`` runs them alone, in a minute or two):
each set of :data:`MULTI_SETS` puts three facts about one invented thing, one sentence each, at
seeded depths of the base text (one in each third), and asks one question that needs all three
in other words. Per set: how many facts lie whole in the `retrieve` plan, how many values the
reply names, and the prompt tokens of the call; and the control, the three facts alone as the
document, with the values it names and its prompt tokens. The goal (issue 51): `retrieve` names
as many facts as the control, with at most 3x its prompt tokens.

Goals (issues: a `retrieve` strategy, a needle benchmark; answers as good as the text kept):
`retrieve` keeps >= 90 % of the needles with a 2,048 context on a ~400k-token document (>= 95 %
with precise context), answers better than every other one-pass strategy, and answers >= 50 %
of the questions.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import random
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.default_model import default_model_path  # noqa: E402
from app.core.engine.host import EngineHost  # noqa: E402
from app.core.engine.types import Finished, LoadSettings  # noqa: E402
from app.core.jobs.tasks import JobFinished, JobResult, PlanReady, ask, planning  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.core.planning.cache import PlanCache  # noqa: E402
from app.core.planning.chunking import sliding_windows  # noqa: E402
from app.core.planning.frame import document_budget  # noqa: E402
from app.core.planning.plan import Plan  # noqa: E402
from app.core.planning.strategies import (  # noqa: E402
    MULTI_PASS,
    STRATEGIES,
    Planner,
    PlanOptions,
    plan_for,
)
from app.core.planning.terms import terms  # noqa: E402
from app.core.tokens import TokenCounter, host_counter  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402

DEEP = 300_000  # tokens: the depth the issue names ("a fact on page 300")
GOAL_RETENTION = 0.90
GOAL_N_CTX = 2048
GOAL_TOKENS = 400_000
GOAL_ACCURACY = 0.50
MISSED_RETENTION = ("BM25 ranks the parts holding the missed needles below those the budget "
                    "holds: their questions share too few words with them.")


@dataclass(frozen=True)
class Needle:
    """An invented fact, a question that says it in other words, and the values that answer it
    (any one of them in the reply counts)."""

    fact: str
    question: str
    answers: tuple[str, ...]

    def answered(self, reply: str) -> bool:
        low = reply.lower()
        return any(a.lower() in low for a in self.answers)


NEEDLES: tuple[Needle, ...] = (
    Needle("The night porter of Vellmoor Abbey keeps the cellar key in a green tin marked 5726.",
           "Where does the abbey's overnight doorkeeper store the key to the cellar?",
           ("green tin", "5726")),
    Needle("The Tessaly weaving guild dyes its festival banners with a crushed beetle called the "
           "ombrine.",
           "What insect gives the colour to the cloth flags the Tessaly weavers hang at "
           "celebrations?",
           ("ombrine",)),
    Needle("Dr. Ilse Varga sounded Lake Corrimund with a weighted silk line and found it 2,964 "
           "metres deep.",
           "How far down does the water of Corrimund go, according to Varga's measurement?",
           ("2,964", "2964", "2 964")),
    Needle("The orchard keepers of Pellow Hill graft their pear trees onto quince roots brought "
           "from Sarnakel.",
           "From which place do the Pellow Hill fruit growers get the rootstock for their pears?",
           ("Sarnakel",)),
    Needle("Sailors call the flashing pattern of the Osterlund lighthouse the Dunmarra wink.",
           "What name do seamen give to the way the Osterlund beacon blinks?",
           ("Dunmarra",)),
    Needle("The Kestrine monks brew a bitter winter ale flavoured with a root they call "
           "yarrowmint.",
           "Which plant root seasons the cold-weather beer of the Kestrine brothers?",
           ("yarrowmint",)),
    Needle("The clockmaker Anselm Drewitt hid the spare winding key of the Brackwater town clock "
           "under floorboard 6052.",
           "Beneath which plank did Drewitt conceal the extra key for Brackwater's public "
           "timepiece?",
           ("6052",)),
    Needle("The mountain village of Huskarn elects its mayor by dropping carved quorrel stones "
           "into a copper urn.",
           "How do the people of Huskarn choose the head of their settlement?",
           ("quorrel", "copper urn")),
    Needle("The Sorrel Street bakery sells a black rye loaf known as the midnight brannock.",
           "What dark bread can be bought at the baker's shop on Sorrel Street?",
           ("brannock",)),
    Needle("The astronomer Paulina Ostrova named the faint comet she found in 1893 after her "
           "cat, Pimbleton.",
           "After which pet did Ostrova call the dim comet she discovered?",
           ("Pimbleton",)),
    Needle("The Quenford rowing club paints the blades of its oars in stripes of vermeline and "
           "teal.",
           "Which colours decorate the paddles of the Quenford boat club?",
           ("vermeline",)),
    Needle("The cartographer Lise Amberley drew the lost island of Thornhollow on a map dated "
           "1738.",
           "In what year was Amberley's chart showing Thornhollow made?",
           ("1738",)),
    Needle("At the Coldharrow mine the shift whistle is blown by a retired engineer named Wilmot "
           "Praskey.",
           "Who sounds the signal between work periods in the Coldharrow pit?",
           ("Praskey",)),
    Needle("The Fennick glassworks cools its finest goblets for nine days in a kiln called the "
           "Slow Sister.",
           "What do the Fennick glassmakers call the oven where their best drinking glasses "
           "rest?",
           ("Slow Sister",)),
    Needle("The conductor Mateo Grillane tunes his orchestra to a pitch of 447 hertz.",
           "To what frequency does Grillane have his musicians adjust their instruments?",
           ("447",)),
    Needle("The beekeepers of Ashcombe Vale gather a pale honey from the blossoms of the "
           "marrowthorn shrub.",
           "From which bush do the Ashcombe Vale bees collect nectar for their light-coloured "
           "honey?",
           ("marrowthorn",)),
    Needle("The toll keeper of Wendle Bridge charges each traveller a fee of two brass glimmets.",
           "What coins must someone pay to cross at Wendle?",
           ("glimmet",)),
    Needle("The ferry Quillhaven is steered across the Marrow Strait by a pilot called Odalys "
           "Krenn.",
           "Who is at the helm of the Quillhaven when it makes its crossing?",
           ("Krenn",)),
    Needle("The Dovecote Library lends its rarest atlas only to readers who know the password "
           "lanternfish.",
           "What secret word opens the Dovecote collection's most precious book of maps to a "
           "borrower?",
           ("lanternfish",)),
    Needle("The tailor Corvin Mesk lines every winter coat he makes with the fleece of Ardish "
           "sheep.",
           "Which breed's wool does Mesk put inside the cold-season jackets he sews?",
           ("Ardish",)),
)  # fmt: skip


@dataclass(frozen=True)
class FactSet:
    """Three facts about one invented thing, each a sentence of its own with a value the base
    text does not hold, and one question that asks for all three in other words."""

    topic: str
    facts: tuple[Needle, ...]
    question: str


MULTI_SETS: tuple[FactSet, ...] = (
    FactSet("Harrowgate lanterns", (
        Needle("The first of the three Harrowgate lanterns was forged by a smith named Oskel "
               "Vantry.", "", ("Vantry",)),
        Needle("The second Harrowgate lantern was made in the hill village of Mirrowby.", "",
               ("Mirrowby",)),
        Needle("The third Harrowgate lantern is lit only on the night of the Saltmoon fair.", "",
               ("Saltmoon",))),
        "Which smith made the earliest of Harrowgate's lamps, in what settlement was the next one "
        "produced, and at which festival is the last one kindled?"),
    FactSet("Quarrendale observatory", (
        Needle("The Quarrendale observatory was paid for by a salt merchant called Ivo Brennart.",
               "", ("Brennart",)),
        Needle("The great telescope of the Quarrendale observatory has a mirror cast from Telvish "
               "glass.", "", ("Telvish",)),
        Needle("Visitors reach the Quarrendale observatory by climbing 1,482 stone steps.", "",
               ("1,482", "1482", "1 482"))),
        "Who funded the stargazing tower at Quarrendale, what kind of glass went into its big "
        "instrument, and how many stairs lead up to it?"),
    FactSet("schooner Mallory Wren", (
        Needle("The captain of the schooner Mallory Wren is a former whaler called Tobiah "
               "Fenwright.", "", ("Fenwright",)),
        Needle("The schooner Mallory Wren sails from the fishing town of Gullsreach.", "",
               ("Gullsreach",)),
        Needle("Sailors on the schooner Mallory Wren call the blue of its hull drownberry.", "",
               ("drownberry",))),
        "Who commands the Mallory Wren, out of which harbour does that ship put to sea, and what "
        "name does its crew give to the colour of the vessel?"),
    FactSet("inventor Barnaby Quist", (
        Needle("The inventor Barnaby Quist was born in the river town of Elderspool.", "",
               ("Elderspool",)),
        Needle("The calculating engine of Barnaby Quist is kept today at the Harkmoor museum.", "",
               ("Harkmoor",)),
        Needle("Barnaby Quist gave his favourite machine the name Tollivant.", "",
               ("Tollivant",))),
        "Where did Quist come into the world, in which collection can his reckoning device be "
        "seen now, and what did he call the contraption he loved most?"),
)  # fmt: skip
# The first set, under the names the single multi-fact row had
MULTI_FACTS: tuple[Needle, ...] = MULTI_SETS[0].facts
MULTI_QUESTION: str = MULTI_SETS[0].question


# ----- the document and its needles ------------------------------------------------------------

_CUT = re.compile(r"(?<=\S)\n\n")  # a paragraph's end: a non-space character, then a blank line


@dataclass(frozen=True)
class Base:
    """A document without needles: its paragraph ends (where a needle can go) and the tokens
    before each. The counts add up exactly when the counter ``splits_at_spaces`` (a non-space
    character followed by whitespace is always a token boundary)."""

    text: str
    cuts: tuple[int, ...]  # character offsets of paragraph ends, each followed by "\n\n"
    tokens_at: tuple[int, ...]  # tokens of text[:cut], per cut
    tokens: int  # the whole text


def measure(text: str, counter: TokenCounter) -> Base:
    """``text`` as a :class:`Base`: its paragraph ends and the tokens before each."""
    cuts = [m.start() for m in _CUT.finditer(text)]
    bounds = [0, *cuts, len(text)]
    counts = counter.count_many([text[a:b] for a, b in itertools.pairwise(bounds)])
    before = list(itertools.accumulate(counts))
    return Base(text, tuple(cuts), tuple(before[:-1]), before[-1] if before else 0)


def base_document(counter: TokenCounter, tokens: int, source: str | None = None) -> Base:
    """``source`` (the Jargon File) repeated as needed and cut at the last paragraph end within
    ``tokens`` tokens."""
    source = sample_document().read_text(encoding="utf-8") if source is None else source
    probe = source[:200_000]
    chars_per_token = len(probe) / max(1, counter.count(probe))
    need = int(tokens * chars_per_token * 1.1) + 2_000
    while True:
        text = source
        while len(text) < need:
            text += "\n\n" + source
        whole = measure(text[:need], counter)
        if whole.tokens > tokens:
            break
        need = int(need * 1.25)  # the start of the source was denser than the rest
    k = bisect.bisect_right(whole.tokens_at, tokens) - 1
    if k < 0:
        raise ValueError(f"no paragraph of the document ends within {tokens:,} tokens")
    return Base(whole.text[: whole.cuts[k]], whole.cuts[:k], whole.tokens_at[:k],
                whole.tokens_at[k])  # fmt: skip


def needle_depths(total: int, n: int, rng: random.Random, deep: int = DEEP) -> list[int]:
    """``n`` token depths in a document of ``total`` tokens: two near ``deep`` (one at it, one
    within 15k) when the document reaches past it, else one at three quarters; the rest uniform
    between 2 % and 98 %."""
    if total > deep + 20_000:
        near = [deep, deep + rng.randint(-15_000, 15_000)]
    else:
        near = [int(total * 0.75)]
    depths = near[:n]
    while len(depths) < n:
        depths.append(rng.randint(int(total * 0.02), int(total * 0.98)))
    return depths


@dataclass(frozen=True)
class Planted:
    """The document with its needles: per needle its sentence's character range and the tokens
    of the document before its paragraph."""

    text: str
    needles: tuple[Needle, ...]
    spans: tuple[tuple[int, int], ...]
    depths: tuple[int, ...]
    base_tokens: int


def absent_values(base: str, needles: Sequence[Needle]) -> list[str]:
    """The needles' values (and facts) that the base text holds already (case ignored)."""
    low = base.lower()
    return [v for n in needles for v in (*n.answers, n.fact) if v.lower() in low]


_SENTENCE_GAP = re.compile(r"(?<=[a-z][.!?]) (?=[A-Z])")  # between two sentences of a paragraph


def plant(base: Base, needles: Sequence[Needle], depths: Sequence[int],
          counter: TokenCounter, *, inside: bool = False) -> Planted:  # fmt: skip
    """Each needle as a paragraph of its own at the paragraph end nearest its depth (each at
    another one); ``inside``: as a sentence in the middle of the paragraph that ends there
    (after the sentence end nearest its middle; at its end when it has none), as facts sit in
    a long text. Raises ValueError when the base text holds a needle's value or fact already,
    or has fewer paragraph ends than needles."""
    if len(needles) != len(depths):
        raise ValueError("one depth per needle")
    if len(base.cuts) < len(needles):
        raise ValueError(f"{len(needles)} needles, {len(base.cuts)} paragraph ends")
    if found := absent_values(base.text, needles):
        raise ValueError(f"the document holds these needles' values already: {found}")
    used: set[int] = set()
    where: list[int] = []
    for d in depths:
        i = bisect.bisect_left(base.tokens_at, d)
        near = range(max(0, i - len(needles) - 1), min(len(base.cuts), i + len(needles) + 1))
        order = sorted(near, key=lambda k: (abs(base.tokens_at[k] - d), k))
        k = next(k for k in order if k not in used)
        used.add(k)
        where.append(k)
    # where each goes, and the text around it: its own paragraph, a sentence before the next
    # one of a paragraph, or the paragraph's last sentence
    at_of = {i: (_middle(base, k) if inside else base.cuts[k]) for i, k in enumerate(where)}
    inserts = [("\n\n" + n.fact if not inside else
                " " + n.fact if at_of[i] == base.cuts[where[i]] else n.fact + " ")
               for i, n in enumerate(needles)]  # fmt: skip
    sizes = counter.count_many(inserts)
    pieces: list[str] = []
    spans: list[tuple[int, int]] = [(0, 0)] * len(needles)
    depth_of: list[int] = [0] * len(needles)
    pos = prev = added = 0
    for k, i in sorted(zip(where, range(len(needles)), strict=True)):
        at = at_of[i]
        pieces.append(base.text[prev:at])
        pos += at - prev
        lead = inserts[i].index(needles[i].fact)
        spans[i] = (pos + lead, pos + lead + len(needles[i].fact))
        depth_of[i] = base.tokens_at[k] + added
        pieces.append(inserts[i])
        pos += len(inserts[i])
        added += sizes[i]
        prev = at
    pieces.append(base.text[prev:])
    return Planted("".join(pieces), tuple(needles), tuple(spans), tuple(depth_of), base.tokens)


def _middle(base: Base, k: int) -> int:
    """Where a sentence starts nearest the middle of the paragraph that ends at cut ``k``
    (the cut itself, as " " + fact, when the paragraph has one sentence)."""
    end = base.cuts[k]
    start = base.text.rfind("\n\n", 0, end) + 2
    gaps = [m.end() for m in _SENTENCE_GAP.finditer(base.text, start, end)]
    if not gaps:
        return end
    mid = (start + end) // 2
    return min(gaps, key=lambda g: abs(g - mid))


# ----- retention, paraphrase -------------------------------------------------------------------


def reaches(plan: Plan) -> list[tuple[int, int]]:
    """The character ranges the model reads whole, as the ask job lays the plan out: the kept
    spans, adjacent ones joined (one pass), or each pass over the document (multi-pass;
    ``rolling`` asks over consecutive windows without overlap, as the job does)."""
    if plan.windows:
        if plan.strategy == "rolling":
            chunks = plan.chunks
            return [(chunks[w.first].start, chunks[w.last].end)
                    for w in sliding_windows(chunks, plan.budget, 0.0)
                    if w.tokens <= plan.budget]  # fmt: skip
        return [(w.start, w.end) for w in plan.windows]
    out: list[tuple[int, int]] = []
    for s in plan.kept:
        if out and out[-1][1] == s.start:
            out[-1] = (out[-1][0], s.end)
        else:
            out.append((s.start, s.end))
    return out


def retained(plan: Plan, spans: Sequence[tuple[int, int]]) -> list[bool]:
    """Per needle (its character range): whether it lies whole in what reaches the model."""
    ranges = reaches(plan)
    starts = [a for a, _ in ranges]
    out = []
    for s, e in spans:
        i = bisect.bisect_right(starts, s) - 1
        # multi-pass windows overlap: any window that starts at or before the needle may hold it
        out.append(any(ranges[j][0] <= s and e <= ranges[j][1] for j in range(i, -1, -1))
                   if plan.windows else i >= 0 and e <= ranges[i][1])  # fmt: skip
    return out


def shared_terms(fact: str, question: str) -> float:
    """The share of the question's content words (as `retrieve` sees them: stemmed, function
    words dropped) that the fact holds too."""
    q = set(terms(question))
    return len(q & set(terms(fact))) / len(q) if q else 0.0


def shared_run(fact: str, question: str, n: int = 3) -> str:
    """A run of ``n`` words (any words, case ignored) the question copies from the fact, or ""."""
    def runs(text: str) -> set[tuple[str, ...]]:
        words = re.findall(r"\w+", text.lower())
        return set(zip(*(words[i:] for i in range(n)), strict=False))

    common = runs(fact) & runs(question)
    return " ".join(min(common)) if common else ""


# ----- the runs ------------------------------------------------------------------------------


@dataclass
class Figures:
    """One strategy's figures."""

    strategy: str
    plans: list[Plan]
    kept: list[bool]
    first_ms: float
    later_ms: float
    answered: list[bool] | None = None
    result: JobResult | None = None
    job_s: float = 0.0
    estimate: tuple[int, float] | None = None  # (prompt tokens, seconds) per question, not run
    notes: list[str] = field(default_factory=list)

    @property
    def retention(self) -> float:
        return sum(self.kept) / len(self.kept) if self.kept else 0.0

    @property
    def accuracy(self) -> float | None:
        return None if self.answered is None else sum(self.answered) / len(self.answered)


FILL = "retrieve-fill"  # `retrieve` under its earlier rule: the budget filled


def plan_all(strategy: str, planted: Planted, counter: TokenCounter, model: Path, *, n_ctx: int,
             max_tokens: int) -> tuple[Planner, Figures]:  # fmt: skip
    """Each question's plan on a planner of its own (so the first includes the chunking), with
    the budget of the ask job that asks them all. ``retrieve-fill``'s plans are handed to the
    planner as `retrieve`'s, so the job runs them."""
    questions = [n.question for n in planted.needles]
    # room for every question's plan: the job must find the plans made here (fill's above all)
    planner = Planner(planted.text, counter, cache=PlanCache(max_plans=4 * len(questions) + 16))
    fill = strategy == FILL
    name = "retrieve" if fill else strategy
    instruction, reserve = planning("ask", name, counter, max_tokens=max_tokens,
                                    questions=questions)  # fmt: skip
    room = 0  # fill: plan_for's budget, planned with the earlier rule
    if fill:
        room = document_budget(model, n_ctx=n_ctx, reserve=reserve, counter=counter,
                               task=instruction).available  # fmt: skip
    plans, ms = [], []
    for q in questions:
        t0 = time.perf_counter()
        if fill:
            made = planner.plan(name, room, PlanOptions(question=q, fill=True))
            planner.remember(made)  # what the job's `retrieve` plan for q is
            plans.append(made)
        else:
            plans.append(plan_for(planner, strategy, model, instruction=instruction,
                                  n_ctx=n_ctx, reserve=reserve, question=q))  # fmt: skip
        ms.append((time.perf_counter() - t0) * 1000)
    kept = [retained(p, [span])[0] for p, span in zip(plans, planted.spans, strict=True)]
    later = statistics.median(ms[1:]) if len(ms) > 1 else float("nan")
    return planner, Figures(strategy, plans, kept, ms[0], later)


def speeds(host: EngineHost, text: str, tokens: int, max_tokens: int) -> tuple[float, float]:
    """(prompt tokens/s, reply tokens/s) of one call of about ``tokens`` tokens, from empty."""
    ids = host.tokenize(text[: tokens * 8], add_special=False)[:tokens]
    host.reset()
    stats = None
    for ev in host.generate(ids, max_tokens=max_tokens):
        if isinstance(ev, Finished):
            stats = ev.stats
    host.reset()
    assert stats is not None
    gen = stats.gen_tokens_per_s or stats.prompt_tokens_per_s / 10
    return stats.prompt_tokens_per_s, gen


def multi_pass_estimate(fig: Figures, *, n_ctx: int, max_tokens: int, prompt_rate: float,
                        gen_rate: float) -> tuple[int, float]:  # fmt: skip
    """(prompt tokens, seconds) one question would take: every pass (its chunks, the chat frame
    and the question) and the combining call, each with a reply of ``max_tokens``."""
    plan = fig.plans[0]
    passes = reaches(plan)
    frame = max(0, n_ctx - plan.budget - max_tokens)  # frame and question, per call
    doc = sum(w.tokens for w in plan.windows) if plan.strategy != "rolling" else plan.total_tokens
    prompt = doc + len(passes) * frame + n_ctx  # the combining call: at most a full context
    seconds = prompt / prompt_rate + (len(passes) + 1) * max_tokens / gen_rate
    return prompt, seconds


def run_job(host: EngineHost, planner: Planner, fig: Figures, planted: Planted,
            counter: TokenCounter, *, n_ctx: int, max_tokens: int) -> None:  # fmt: skip
    """Ask every question in one job under ``fig.strategy``; record which replies hold the
    value."""
    questions = [n.question for n in planted.needles]
    host.reset()
    t0 = time.perf_counter()
    result = None
    strategy = "retrieve" if fig.strategy == FILL else fig.strategy
    for ev in ask(host, planted.text, counter, questions=questions, strategy=strategy,
                  n_ctx=n_ctx, max_tokens=max_tokens, planner=planner):  # fmt: skip
        if isinstance(ev, PlanReady) and ev.budget != fig.plans[0].budget:
            fig.notes.append(f"the job planned with a budget of {ev.budget:,}, the benchmark "
                             f"with {fig.plans[0].budget:,}")  # fmt: skip
        elif isinstance(ev, JobFinished):
            result = ev.result
    fig.job_s = time.perf_counter() - t0
    assert result is not None
    fig.result = result
    replies = {o.step: o.text for o in result.outputs}  # the last output of each step
    fig.answered = [n.answered(replies.get(f"answer {i + 1}", ""))
                    for i, n in enumerate(planted.needles)]  # fmt: skip
    if result.refused or result.error:
        fig.notes.append(f"the job ended: {result.refused or result.error}")


def control(host: EngineHost, planted: Planted, counter: TokenCounter, *, n_ctx: int,
            max_tokens: int) -> list[bool]:  # fmt: skip
    """Per needle: whether the model answers its question with the fact alone as the document
    (the most any strategy can get from this model)."""
    out = []
    for n in planted.needles:
        host.reset()
        result = None
        for ev in ask(host, n.fact, counter, questions=[n.question], strategy="head", n_ctx=n_ctx,
                      max_tokens=max_tokens):  # fmt: skip
            if isinstance(ev, JobFinished):
                result = ev.result
        out.append(result is not None and n.answered(result.text))
    return out


def ask_once(host: EngineHost, text: str, counter: TokenCounter, question: str, strategy: str,
             *, n_ctx: int, max_tokens: int,
             planner: Planner | None = None) -> JobResult | None:  # fmt: skip
    """One ``ask`` job with one question, from an empty cache: its result (None if none came)."""
    host.reset()
    result = None
    for ev in ask(host, text, counter, questions=[question], strategy=strategy, n_ctx=n_ctx,
                  max_tokens=max_tokens, planner=planner):  # fmt: skip
        if isinstance(ev, JobFinished):
            result = ev.result
    return result


@dataclass
class MultiFact:
    """One multi-fact question: under `retrieve` on the long document, facts kept whole in the
    plan and values named in the reply; and the control, the three facts alone as the
    document. Prompt tokens are the whole prompt of the one model call (frame, text, question)."""

    facts: FactSet
    depths: tuple[int, ...]  # tokens before each fact's paragraph, in the set's order
    kept_each: tuple[bool, ...]  # per fact, in the set's order
    named_each: tuple[bool, ...]
    kept_tokens: int
    prompt_tokens: int
    reply: str
    control_each: tuple[bool, ...]
    control_prompt_tokens: int
    control_reply: str
    # the facts alone in the order the question asks for them: what no retriever can know
    # (SmolLM2 names 9 of 12 so, 4 to 8 in the other orders): reported, not the goal
    asked_each: tuple[bool, ...] = ()

    @property
    def topic(self) -> str:
        return self.facts.topic

    @property
    def kept(self) -> int:
        return sum(self.kept_each)

    @property
    def named(self) -> int:
        return sum(self.named_each)

    @property
    def control_named(self) -> int:
        return sum(self.control_each)

    @property
    def asked_named(self) -> int:
        return sum(self.asked_each)

    def values(self, which: Sequence[bool]) -> str:
        """The first value of each fact ``which`` marks, or "none"."""
        got = [f.answers[0] for f, w in zip(self.facts.facts, which, strict=True) if w]
        return ", ".join(got) or "none"


def multi_depths(total: int, rng: random.Random) -> list[int]:
    """Three token depths, one in each third of a ``total``-token document (2 % clear of the
    thirds' edges), in a seeded order: the facts stay far apart whatever the seed."""
    depths = [rng.randint(int(total * (i / 3 + 0.02)), int(total * ((i + 1) / 3 - 0.02)))
              for i in range(3)]  # fmt: skip
    rng.shuffle(depths)
    return depths


def multi_fact(host: EngineHost, base: Base, counter: TokenCounter, model: Path, facts: FactSet,
               *, depths: Sequence[int], n_ctx: int, max_tokens: int,
               inside: bool = False) -> MultiFact:  # fmt: skip
    """``facts`` planted at ``depths`` of ``base``, its question planned and asked under
    `retrieve`, then asked with the facts alone as the document (a reply of twice
    ``max_tokens`` each time: three values): the control, in the order they stand in the
    document (the document with everything else taken out), and in the question's order.

    A small model names more facts when they come in the order the question asks for them
    (SmolLM2 on these sets: 9 of 12 so, 4 to 8 in the five other orders), and the order of the
    document's facts is the seed's: the control follows the document, as `retrieve` does."""
    planted = plant(base, facts.facts, depths, counter, inside=inside)
    planner = Planner(planted.text, counter)
    instruction, reserve = planning("ask", "retrieve", counter, max_tokens=2 * max_tokens,
                                    questions=[facts.question])  # fmt: skip
    plan = plan_for(planner, "retrieve", model, instruction=instruction, n_ctx=n_ctx,
                    reserve=reserve, question=facts.question)  # fmt: skip
    kept = retained(plan, planted.spans)
    result = ask_once(host, planted.text, counter, facts.question, "retrieve", n_ctx=n_ctx,
                      max_tokens=2 * max_tokens, planner=planner)  # fmt: skip
    in_document = sorted(facts.facts, key=lambda f: planted.depths[facts.facts.index(f)])
    alone = ask_once(host, "\n\n".join(f.fact for f in in_document), counter, facts.question,
                     "head", n_ctx=n_ctx, max_tokens=2 * max_tokens)  # fmt: skip
    asked = ask_once(host, "\n\n".join(f.fact for f in facts.facts), counter, facts.question,
                     "head", n_ctx=n_ctx, max_tokens=2 * max_tokens)  # fmt: skip
    reply = result.text if result is not None else ""
    control_reply = alone.text if alone is not None else ""
    asked_reply = asked.text if asked is not None else ""
    return MultiFact(
        facts, planted.depths, tuple(kept), tuple(f.answered(reply) for f in facts.facts),
        plan.kept_tokens, result.prompt_tokens if result is not None else 0, reply,
        tuple(f.answered(control_reply) for f in facts.facts),
        alone.prompt_tokens if alone is not None else 0, control_reply,
        tuple(f.answered(asked_reply) for f in facts.facts))  # fmt: skip


def multi_facts(host: EngineHost, base: Base, counter: TokenCounter, model: Path, *, seed: int,
                n_ctx: int, max_tokens: int, inside: bool = False) -> list[MultiFact]:  # fmt: skip
    """Every set of :data:`MULTI_SETS` in a document of its own, at depths seeded by ``seed``
    (``inside``: each fact a sentence inside a paragraph, see :func:`plant`)."""
    rng = random.Random(seed)
    out = []
    for facts in MULTI_SETS:
        got = multi_fact(host, base, counter, model, facts, depths=multi_depths(base.tokens, rng),
                         n_ctx=n_ctx, max_tokens=max_tokens, inside=inside)  # fmt: skip
        print(f"multi-fact {got.topic}: retrieve kept {got.kept}/3, named {got.named}/3 "
              f"({got.prompt_tokens:,} prompt tokens); control named {got.control_named}/3 "
              f"({got.control_prompt_tokens:,}), in the question's order {got.asked_named}/3",
              flush=True)  # fmt: skip
        out.append(got)
    return out


def _short(reply: str, n: int = 90) -> str:
    return repr(" ".join(reply.split())[:n])


def multi_report(results: Sequence[MultiFact]) -> list[str]:
    """The multi-fact table, per set and in total, with the goal's two figures."""
    head = (f"{'multi-fact set':24s} {'depths of facts 1-3':>26s} {'kept':>5s} {'named':>6s} "
            f"{'prompt':>7s} {'control named':>14s} {'prompt':>7s}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in results:
        depths = ", ".join(f"{d:,}" for d in r.depths)
        lines.append(f"{r.topic:24s} {depths:>26s} {r.kept:>3d}/3 {r.named:>4d}/3 "
                     f"{r.prompt_tokens:>7,} {r.control_named:>12d}/3 "
                     f"{r.control_prompt_tokens:>7,}")  # fmt: skip
    n = 3 * len(results)
    named = sum(r.named for r in results)
    control = sum(r.control_named for r in results)
    prompt = sum(r.prompt_tokens for r in results)
    control_prompt = sum(r.control_prompt_tokens for r in results)
    ratio = prompt / max(control_prompt, 1)
    asked = sum(r.asked_named for r in results)
    lines.append(f"multi-fact: retrieve kept {sum(r.kept for r in results)} of {n} facts and named "
                 f"{named} of {n}, control (the facts alone, in the document's order) named "
                 f"{control} of {n} (in the question's order {asked} of {n}); prompt tokens "
                 f"retrieve/control {prompt:,}/{control_prompt:,} = {ratio:.2f}x")  # fmt: skip
    met = named >= control and ratio <= 3
    lines.append(f"retrieve names as many facts as the control with at most 3x its prompt tokens: "
                 f"{'met' if met else 'not met'}")  # fmt: skip
    for r in results:
        lines.append(f"  {r.topic}: retrieve kept {r.values(r.kept_each)} "
                     f"({r.kept_tokens:,} document tokens), named {r.values(r.named_each)}: "
                     f"{_short(r.reply)}")  # fmt: skip
        lines.append(f"  {'':{len(r.topic)}s}  control named {r.values(r.control_each)}: "
                     f"{_short(r.control_reply)}; in the question's order "
                     f"{r.values(r.asked_each)}")  # fmt: skip
    return lines


def multi_rows(results: Sequence[MultiFact], note: str) -> list[Row]:
    """The multi-fact figures as JSON rows: facts kept, facts named against the control (a
    control that names none counts as 1, so naming none is never met), prompt tokens against
    the control's."""
    n = 3 * len(results)
    kept = sum(r.kept for r in results)
    named = sum(r.named for r in results)
    control = sum(r.control_named for r in results)
    prompt = sum(r.prompt_tokens for r in results)
    control_prompt = sum(r.control_prompt_tokens for r in results)
    return [
        row("retrieve, multi-fact questions: facts kept whole in the plan",
            f"{n} facts planted", kept / n * 100, kept / n, ">= 0.90", unit="%", note=note),
        row("retrieve, multi-fact questions: facts named",
            f"the facts alone as the document, in its order ({control} of {n})", named / n * 100,
            named / max(control, 1), ">= 1.0", unit="%", note=note),
        row("retrieve, multi-fact questions: prompt tokens per question",
            f"the facts alone as the document ({control_prompt / len(results):,.0f})",
            prompt / len(results), prompt / max(control_prompt, 1), "<= 3", unit="tokens",
            note=note),
    ]  # fmt: skip


# ----- the report ------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def table(figs: Sequence[Figures], n: int) -> list[str]:
    head = (f"{'strategy':11s} {'retention':>10s} {'accuracy':>9s} {'planning ms first/later':>24s}"
            f"  prompt tokens evaluated")  # fmt: skip
    lines = [head, "-" * len(head)]
    for f in figs:
        multi = f.strategy in MULTI_PASS
        ret = f"{_pct(f.retention)}{'*' if multi else ''}"
        plan_ms = f"{f.first_ms:,.1f} / {f.later_ms:,.2f}"
        if f.result is not None:
            acc = _pct(f.accuracy)
            ev = f.result.evaluated_tokens
            tokens = f"{ev:,} ({ev / n:,.0f} per question)"
        elif f.estimate is not None:
            acc = "not run"
            tokens = (f"not run (would evaluate {f.estimate[0]:,} tokens, about "
                      f"{f.estimate[1] / 60:,.0f} min per question)")  # fmt: skip
        else:
            acc, tokens = "—", "—"
        lines.append(f"{f.strategy:11s} {ret:>10s} {acc:>9s} {plan_ms:>24s}  {tokens}")
    return lines


def placing(plan: Plan, span: tuple[int, int]) -> str:
    """Where `retrieve` ranked the part that holds a needle, in its words: "rank 3 (score 9.1)",
    "next to rank 2", "no match"; and the worst rank it kept for its own score."""
    own = [s.rank for s in plan.kept if s.rank is not None and s.next_to is None]
    worst = f"; kept ranks 1–{max(own)}" if own else ""
    for s in (*plan.kept, *plan.dropped):
        if s.start <= span[0] < s.end:
            if s.next_to is not None:
                return f"next to rank {s.next_to}{worst}"
            if s.rank is None:
                return f"no match{worst}"
            return f"rank {s.rank} (score {s.score or 0:.1f}){worst}"
    return "not in the plan"


def missed_accuracy(retrieve: Figures, alone: int, n: int) -> str:
    kept = sum(retrieve.kept)
    answered = sum(retrieve.answered or [])
    if kept > answered:
        return (f"{kept} of {n} needles reach the model under retrieve and it answers {answered} "
                f"of them; with the fact alone as the document it answers {alone}: the model "
                "does not find the fact among the other parts retrieve keeps.")
    return f"retrieve keeps {kept} of {n} needles, and the model answers {answered} of them."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=default_model_path())
    parser.add_argument("--needles", type=int, default=len(NEEDLES),
                        help=f"how many needles to plant (at most {len(NEEDLES)})")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="needles and depths")
    parser.add_argument("--n-ctx", type=int, default=GOAL_N_CTX)
    parser.add_argument("--tokens", type=int, default=GOAL_TOKENS, help="document size in tokens")
    parser.add_argument("--max-tokens", type=int, default=48, help="reply tokens per question")
    parser.add_argument("--multi-pass", action="store_true",
                        help="also ask with rolling, semantic and map-reduce (each question reads "
                             "the whole document: hours on a CPU)")  # fmt: skip
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help="which strategies, comma-separated (default: all)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=0, help="0: the engine's default")
    parser.add_argument("--fill", action="store_true",
                        help="also run retrieve under its earlier rule (the budget filled)")
    parser.add_argument("--no-multi-fact", action="store_true",
                        help="skip the multi-fact questions")
    parser.add_argument("--only-multi-fact", action="store_true",
                        help="only the multi-fact questions (retrieve against the facts alone)")
    parser.add_argument("--inside", action="store_true",
                        help="plant each fact as a sentence inside a paragraph, not a paragraph "
                             "of its own")  # fmt: skip
    args = parse_args(parser, {"tokens": 40_000, "needles": 8})
    if args.only_multi_fact and args.no_multi_fact:
        parser.error("--only-multi-fact and --no-multi-fact exclude each other")
    if not 1 <= args.needles <= len(NEEDLES):
        parser.error(f"--needles must be between 1 and {len(NEEDLES)}")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if args.fill and "retrieve" in strategies:
        strategies.insert(strategies.index("retrieve") + 1, FILL)
    if unknown := [s for s in strategies if s not in STRATEGIES and s != FILL]:
        parser.error(f"unknown strategies {unknown} (choose from {', '.join(STRATEGIES)})")
    t_start = time.perf_counter()
    settings = LoadSettings(n_ctx=args.n_ctx, **({"n_threads": args.threads} if args.threads
                                                 else {}))  # fmt: skip
    with EngineHost() as host:
        host.load(args.model, settings)
        counter = host_counter(args.model, host)
        base = base_document(counter, args.tokens)
        if args.only_multi_fact:
            return only_multi_facts(host, base, counter, args, t_start)
        rng = random.Random(args.seed)
        needles = rng.sample(NEEDLES, args.needles)
        planted = plant(base, needles, needle_depths(base.tokens, args.needles, rng), counter,
                        inside=args.inside)  # fmt: skip
        n = len(needles)
        print(f"model {args.model.name}, n_ctx {args.n_ctx:,}, threads {settings.n_threads}; "
              f"the Jargon File cut to {base.tokens:,} tokens, {n} needles (seed {args.seed}"
              f"{', each inside a paragraph' if args.inside else ''}), replies of "
              f"{args.max_tokens} tokens, greedy")  # fmt: skip
        for i in sorted(range(n), key=lambda i: planted.depths[i]):
            print(f"  needle at {planted.depths[i]:>9,} tokens: {needles[i].answers[0]!r:14s} "
                  f"{needles[i].question}")  # fmt: skip

        figs: list[Figures] = []
        planners: dict[str, Planner] = {}
        for strategy in strategies:  # the model's frame read before any timing
            name = "retrieve" if strategy == FILL else strategy
            instruction, reserve = planning("ask", name, counter, max_tokens=args.max_tokens,
                                            questions=[n.question for n in needles])  # fmt: skip
            document_budget(args.model, n_ctx=args.n_ctx, reserve=reserve, counter=counter,
                            task=instruction)  # fmt: skip
        for strategy in strategies:
            planner, fig = plan_all(strategy, planted, counter, args.model, n_ctx=args.n_ctx,
                                    max_tokens=args.max_tokens)  # fmt: skip
            planners[strategy] = planner
            figs.append(fig)
            print(f"planned {strategy}: budget {fig.plans[0].budget:,}, retention "
                  f"{fig.retention:.0%}, first {fig.first_ms:,.1f} ms, later {fig.later_ms:,.2f} "
                  f"ms", flush=True)  # fmt: skip

        for fig in figs:  # one-pass strategies first: they also warm the engine up
            if fig.strategy not in MULTI_PASS:
                run_job(host, planners[fig.strategy], fig, planted, counter, n_ctx=args.n_ctx,
                        max_tokens=args.max_tokens)  # fmt: skip
                print(f"asked {fig.strategy}: accuracy {fig.accuracy:.0%} in {fig.job_s:,.1f} s",
                      flush=True)  # fmt: skip
        alone = control(host, planted, counter, n_ctx=args.n_ctx, max_tokens=args.max_tokens)
        multi: list[MultiFact] = []
        if "retrieve" in strategies and not args.no_multi_fact:
            multi = multi_facts(host, base, counter, args.model, seed=args.seed,
                                n_ctx=args.n_ctx, max_tokens=args.max_tokens,
                                inside=args.inside)  # fmt: skip
        print(f"control: the model answers {sum(alone)} of {n} questions with the fact alone as "
              f"the document", flush=True)  # fmt: skip
        if any(f.strategy in MULTI_PASS for f in figs):
            call = args.n_ctx - args.max_tokens - 8
            prompt_rate, gen_rate = speeds(host, planted.text, call, args.max_tokens)
            print(f"measured: prompt {prompt_rate:,.0f} tokens/s, reply {gen_rate:,.1f} tokens/s "
                  f"(one call of {call:,} tokens)")  # fmt: skip
        for fig in figs:
            if fig.strategy not in MULTI_PASS:
                continue
            fig.estimate = multi_pass_estimate(fig, n_ctx=args.n_ctx, max_tokens=args.max_tokens,
                                               prompt_rate=prompt_rate,
                                               gen_rate=gen_rate)  # fmt: skip
            if args.multi_pass:
                print(f"asking {fig.strategy}: about {fig.estimate[1] * n / 60:,.0f} min for "
                      f"{n} questions", flush=True)  # fmt: skip
                run_job(host, planners[fig.strategy], fig, planted, counter, n_ctx=args.n_ctx,
                        max_tokens=args.max_tokens)  # fmt: skip
                print(f"asked {fig.strategy}: accuracy {fig.accuracy:.0%} in "
                      f"{fig.job_s / 60:,.1f} min", flush=True)  # fmt: skip

    print()
    for line in table(figs, n):
        print(line)
    print(f"{'(control)':11s} {'':>10s} {sum(alone) / n:>9.0%} {'':>24s}  the fact alone as the "
          f"document: the most this model answers")  # fmt: skip
    print("* multi-pass: every chunk reaches the model, in one pass or another; retention counts "
          "the needles that lie whole in one pass")
    print("planning: the first question chunks and counts the document (retrieve also builds its "
          "index); later ones reuse it (retrieve scores the cached index; the others plan the "
          "same whatever is asked and come from the plan cache)")
    for f in figs:
        for note in f.notes:
            print(f"note, {f.strategy}: {note}")

    for f in figs:
        if f.strategy in ("retrieve", FILL):
            kept_mean = statistics.mean(p.kept_tokens for p in f.plans)
            print(f"{f.strategy}: {kept_mean:,.0f} document tokens kept per question (budget "
                  f"{f.plans[0].budget:,}); asked in {f.job_s:,.1f} s, "
                  f"{f.job_s / n:,.2f} s per question")  # fmt: skip
    by = {f.strategy: f for f in figs}
    retrieve = by.get("retrieve")
    rows: list[Row] = []
    print()
    if retrieve is None:
        print("retrieve was not among the strategies run: no goal judged")
        return 0
    retrieve_fig = retrieve
    print("retrieve, per needle (depth: kept, answered, the rank of its part; reply):")
    replies = ({o.step: o.text for o in retrieve_fig.result.outputs}
               if retrieve_fig.result is not None else {})  # fmt: skip
    for i in sorted(range(n), key=lambda i: planted.depths[i]):
        reply = " ".join(replies.get(f"answer {i + 1}", "").split())[:120]
        answered = retrieve_fig.answered[i] if retrieve_fig.answered is not None else None
        kept = "kept" if retrieve_fig.kept[i] else "DROPPED"
        where = placing(retrieve_fig.plans[i], planted.spans[i])
        print(f"  {planted.depths[i]:>9,}: {kept:7s} {'yes' if answered else 'no ':3s} "
              f"{needles[i].answers[0]!r} [{where}]: {reply!r}")  # fmt: skip

    setting = (f"n_ctx {args.n_ctx:,}, {planted.base_tokens:,}-token document, {n} needles, "
               f"seed {args.seed}")  # fmt: skip
    off_goal = args.n_ctx != GOAL_N_CTX or planted.base_tokens < 0.9 * GOAL_TOKENS
    caveat = f" [this run: {setting}, not the goal's setting]" if off_goal else ""
    kept_met = retrieve_fig.retention >= GOAL_RETENTION
    print()
    print(f"retrieve keeps >= 90% of needles with a 2,048 context on a ~400k-token document: "
          f"{'met' if kept_met else 'not met'} ({retrieve_fig.retention:.0%}, "
          f"{sum(retrieve_fig.kept)} of {n}){caveat}")  # fmt: skip
    rows.append(row("retrieve: needles kept whole in the plan", f"{n} needles planted",
                    retrieve_fig.retention * 100, retrieve_fig.retention, ">= 0.90", unit="%",
                    note=setting,
                    why="" if kept_met else MISSED_RETENTION))
    if retrieve_fig.accuracy is not None:
        acc_met = retrieve_fig.accuracy >= GOAL_ACCURACY and retrieve_fig.retention >= 0.95
        print(f"retrieve answers >= 50% of the questions with retention >= 95%: "
              f"{'met' if acc_met else 'not met'} ({retrieve_fig.accuracy:.0%}, retention "
              f"{retrieve_fig.retention:.0%}; the fact alone {sum(alone) / n:.0%}){caveat}")
        rows.append(row("retrieve: questions answered", "the fact alone as the document",
                        retrieve_fig.accuracy * 100, retrieve_fig.accuracy, ">= 0.50", unit="%",
                        note=f"{setting}, {args.model.name}",
                        why="" if acc_met else missed_accuracy(retrieve_fig, sum(alone), n)))
    others = [f for f in figs if f.strategy not in (*MULTI_PASS, "retrieve", FILL)
              and f.accuracy is not None]  # fmt: skip
    if retrieve_fig.accuracy is not None and others:
        best = max(others, key=lambda f: (f.accuracy or 0.0, f.strategy != "refuse"))
        margin = retrieve_fig.accuracy - (best.accuracy or 0.0)
        better = all(retrieve_fig.accuracy > (f.accuracy or 0.0) for f in others)
        figures = ", ".join(f"{f.strategy} {_pct(f.accuracy)}" for f in others)
        print(f"retrieve answers better than every one-pass strategy: "
              f"{'met' if better else 'not met'} (retrieve {_pct(retrieve_fig.accuracy)}; "
              f"{figures}; with the fact alone {sum(alone) / n:.0%}){caveat}")  # fmt: skip
        rows.append(row("retrieve: answer accuracy minus the best other one-pass strategy's",
                        f"{best.strategy} ({_pct(best.accuracy)})", retrieve_fig.accuracy * 100,
                        margin, "> 0", unit="%", note=f"{setting}, {args.model.name}",
                        why="" if better else missed_accuracy(retrieve_fig, sum(alone), n)))
    else:
        print("retrieve answers better than every one-pass strategy: not measured")
    if retrieve_fig.later_ms == retrieve_fig.later_ms:  # not NaN: more than one question
        ratio = retrieve_fig.later_ms / max(retrieve_fig.first_ms, 1e-9)
        rows.append(row("retrieve: planning a later question (cached index)",
                        "planning the first question (chunking, index)", retrieve_fig.later_ms,
                        ratio, "<= 0.05", unit="ms", note=setting))  # fmt: skip
        print(f"retrieve plans a later question in {retrieve_fig.later_ms:,.2f} ms against "
              f"{retrieve_fig.first_ms:,.0f} ms for the first ({ratio:.4f})")  # fmt: skip
    if multi:
        print()
        for line in multi_report(multi):
            print(line)
        rows.extend(multi_rows(multi, f"{multi_setting(args, base)}, {args.model.name}"))
    print(f"whole run: {time.perf_counter() - t_start:,.0f} s")
    write_rows(args.json, "needles", rows)
    return 0


def multi_setting(args: argparse.Namespace, base: Base) -> str:
    return (f"n_ctx {args.n_ctx:,}, {base.tokens:,}-token document, {len(MULTI_SETS)} sets of 3 "
            f"facts, seed {args.seed}{', inside paragraphs' if args.inside else ''}")  # fmt: skip


def only_multi_facts(host: EngineHost, base: Base, counter: TokenCounter,
                     args: argparse.Namespace, t_start: float) -> int:  # fmt: skip
    """``--only-multi-fact``: the multi-fact questions alone, their table and rows."""
    print(f"model {args.model.name}, n_ctx {args.n_ctx:,}; the Jargon File cut to "
          f"{base.tokens:,} tokens, {len(MULTI_SETS)} multi-fact questions (seed {args.seed}), "
          f"replies of {2 * args.max_tokens} tokens, greedy", flush=True)  # fmt: skip
    multi = multi_facts(host, base, counter, args.model, seed=args.seed, n_ctx=args.n_ctx,
                        max_tokens=args.max_tokens, inside=args.inside)  # fmt: skip
    print()
    for line in multi_report(multi):
        print(line)
    print(f"whole run: {time.perf_counter() - t_start:,.0f} s")
    write_rows(args.json, "needles", multi_rows(multi, f"{multi_setting(args, base)}, "
                                                       f"{args.model.name}"))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
