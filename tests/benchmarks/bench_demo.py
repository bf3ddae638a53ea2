"""The first run: which task and strategy answer best on the sample, with the default model.

Run with ``python tests/benchmarks/bench_demo.py [--n-ctx 4096]
[--sampling deterministic,balanced] [--quick] [--json PATH]`` (or ``make bench``). The demo
(``make run``, ``contextlens --demo``) opens the Jargon File sample (resources/samples, about
400,000 tokens) on the default model; this runs, through ``contextlens-cli run --json`` as a
person would, every one-pass strategy on ``summarize`` and on ``ask`` with questions whose
answers the sample holds (each with the words an answer must name), under each sampling preset
given, and scores each reply three ways:

- supported: the share of the reply's sentences that rest on a sentence of the kept text
  (the alignment every done record carries, app/core/jobs/alignment.py: a sentence whose
  content terms the kept text does not hold is invented);
- answered: for ``ask``, the share of questions whose reply names one of the expected words;
  for ``summarize``, whether the summary says what the sample is (jargon, hackers' slang);
- distinct: the share of its word 4-grams a reply says once (greedy decoding can loop, and
  every repeat of a copied phrase is "supported");
- invented names: the names and numbers it gives (capitalized words past a sentence's start,
  figures) that the kept text does not hold ("Eugene Ninon", an ISBN): the alignment scores
  words, and a sentence of the text's words around an invented name still scores well.

A reply is good when it names the answer (a summary: what the document is), does not go round
in a loop (at least :data:`DISTINCT` of its 4-word phrases said once), at least
:data:`SUPPORTED` of it rests on the kept text and it invents no name. The score is the share of
good replies; a sampled preset runs with ``--seeds`` seeds (greedy decoding is the same each
time).

The multi-pass strategies (``rolling``, ``semantic``, ``map-reduce``) read the whole document,
about 400,000 tokens: hours on a laptop's CPU for a first impression, so they are not candidates.

Goal: the demo's choice (``app/services/demo.py``: task, strategy, sampling and questions) is the
best-scoring one, and its replies are supported at least twice as often as the old demo's
(``summarize`` with ``entropy``, sampled).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.child_process import child_env, module_command  # noqa: E402
from app.core.paths import sample_document  # noqa: E402
from app.services.demo import (  # noqa: E402
    DEMO_QUESTIONS,
    DEMO_SAMPLING,
    DEMO_STRATEGY,
    DEMO_TASK,
    OLD_DEMO,
)
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402

# Questions the sample answers, each with words one of which a right answer names (lower case).
QUESTIONS: dict[str, tuple[str, ...]] = {
    "What is a kluge?": ("clever", "trick", "goldberg", "wrong reason", "device", "expedient"),
    "What is a cracker?": ("security", "breaks", "break"),
    "What does foo mean?": ("sample name", "metasyntactic", "disgust", "fubar"),
    "What is a hacker?": ("programmable", "enjoys", "programming", "expert"),
    "What is the hacker ethic?": ("information", "sharing", "share", "open-source"),
    "What does grok mean?": ("understand", "intimately", "heinlein", "martian"),
}
DISTINCT = 0.8  # a reply below this share of 4-word phrases said once goes round in a loop
SUPPORTED = 1 / 3  # a reply with less of it resting on the kept text is mostly invented
# What a summary of the sample must name to say what it is about.
SUBJECT = ("jargon", "hacker", "lexicon", "slang", "glossary")
ONE_PASS = ("head", "middle", "entropy", "retrieve")
TEXT = sample_document().read_text(encoding="utf-8")  # the offsets of the kept spans are its


@dataclass
class Score:
    task: str
    strategy: str
    sampling: str
    supported: list[float] = field(default_factory=list)
    answered: list[bool] = field(default_factory=list)
    distinct: list[float] = field(default_factory=list)
    invented: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0
    prompt_tokens: int = 0

    @property
    def support(self) -> float:
        return statistics.mean(self.supported) if self.supported else 0.0

    @property
    def answers(self) -> float:
        return sum(self.answered) / len(self.answered) if self.answered else 1.0

    @property
    def variety(self) -> float:
        return statistics.mean(self.distinct) if self.distinct else 0.0

    @property
    def score(self) -> float:
        """What a first impression rests on: the share of good replies (see the docstring)."""
        good = [a and d >= DISTINCT and s >= SUPPORTED and not names
                for a, d, s, names in zip(self.answered, self.distinct, self.supported,
                                          self.invented, strict=True)]  # fmt: skip
        return sum(good) / len(good) if good else 0.0

    @property
    def inventing(self) -> float:
        """The share of replies that invent a name or a number."""
        return sum(bool(n) for n in self.invented) / len(self.invented) if self.invented else 0.0


def supported_share(output: dict) -> float:
    """The share of a reply's sentences (by characters) that rest on the kept text."""
    spans = output.get("alignment") or []
    total = sum(a["end"] - a["start"] for a in spans)
    held = sum(a["end"] - a["start"] for a in spans if a["source"] is not None)
    return held / total if total else 0.0


def distinct_share(output: dict) -> float:
    """The share of a reply's word 4-grams said once: a greedy reply that loops ("a collection
    of slang that is not only a collection of slang …") repeats itself, and every repeat of a
    copied phrase is "supported". Prose scores about 1."""
    words = re.findall(r"\w+", output["text"].lower())
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    return len(set(grams)) / len(grams) if grams else 1.0


_NAME = re.compile(r"(?<![.!?:\n]\s)(?<!^)\b([A-Z][\w'-]+|\d[\d,.-]*\d|\d)\b")


def invented_names(text: str, kept: str, question: str) -> list[str]:
    """The names and figures of ``text`` that neither the kept text nor the question holds
    (case ignored); a word that starts a sentence is not taken for a name."""
    held = (kept + " " + question).lower()
    out = []
    for m in _NAME.finditer(text.strip()):
        word = m.group(1)
        if not re.search(rf"(?<!\w){re.escape(word.lower())}(?!\w)", held):
            out.append(word)
    return out


def names_answer(text: str, words: tuple[str, ...]) -> bool:
    low = re.sub(r"\s+", " ", text.lower())
    return any(w in low for w in words)


def run(job: tuple[str, str, str], questions: list[str], args: argparse.Namespace,
        folder: Path, score: Score, *, seed: int = 0) -> None:  # fmt: skip
    """``job`` (task, strategy, sampling preset) on the sample, asking ``questions``; its
    replies are added to ``score``."""
    task, strategy, sampling = job
    argv = ["run", str(sample_document()), "--task", task, "--strategy", strategy,
            "--n-ctx", str(args.n_ctx), "--sampling", sampling, "--seed", str(seed), "--json",
            "--max-tokens", str(args.max_tokens), "--db", str(folder / "h.db")]  # fmt: skip
    for q in questions:
        argv += ["--question", q]
    t0 = time.perf_counter()
    proc = subprocess.run([*module_command("app.cli"), *argv], env=child_env(), text=True,
                          capture_output=True, timeout=args.timeout, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{task}/{strategy} failed ({proc.returncode}): {proc.stderr[-400:]}")
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    score.seconds += time.perf_counter() - t0
    score.prompt_tokens += int(done["prompt_tokens"])
    for i, output in enumerate(done["outputs"]):
        question = questions[i] if task == "ask" else ""
        kept = " ".join(TEXT[a:b] for a, b in output["source_spans"])
        score.supported.append(supported_share(output))
        score.distinct.append(distinct_share(output))
        score.invented.append(invented_names(output["text"], kept, question))
        words = QUESTIONS[question] if task == "ask" else SUBJECT
        score.answered.append(names_answer(output["text"], words))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ctx", type=int, default=4096, help="context (default: the demo's)")
    parser.add_argument("--sampling", default="deterministic,balanced",
                        help="presets to try, comma-separated")  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=160, help="longest reply")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="how many to ask")
    parser.add_argument("--seeds", type=int, default=2, help="seeds of a sampled preset")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds a run may take")
    args = parse_args(parser, {"questions": 3, "max_tokens": 96, "seeds": 1})
    questions = list(QUESTIONS)[: args.questions]
    questions += [q for q in DEMO_QUESTIONS if q not in questions]
    scores: list[Score] = []
    with tempfile.TemporaryDirectory(prefix="contextlens-demo-") as tmp:
        for sampling in args.sampling.split(","):
            for task in ("summarize", "ask"):
                for strategy in ONE_PASS:
                    if task == "summarize" and strategy == "retrieve":
                        continue  # retrieve plans for a question; a summary has none
                    asked = questions if task == "ask" else []
                    s = Score(task, strategy, sampling)
                    seeds = 1 if sampling == "deterministic" else args.seeds
                    for seed in range(seeds):
                        run((task, strategy, sampling), asked, args, Path(tmp), s, seed=seed)
                    scores.append(s)
                    print(f"  {sampling:<13} {task:<9} {strategy:<8} supported {s.support:5.0%}"
                          f"  answered {s.answers:5.0%}  distinct {s.variety:5.0%}  "
                          f"inventing {s.inventing:5.0%}  "
                          f"good {s.score:5.0%}  "
                          f"{s.prompt_tokens:>6,} prompt tokens  {s.seconds:5.1f} s",
                          flush=True)  # fmt: skip
    best = max(scores, key=lambda s: s.score)
    demo = (DEMO_TASK, DEMO_STRATEGY, DEMO_SAMPLING)
    chosen = next(s for s in scores if (s.task, s.strategy, s.sampling) == demo)
    old = next((s for s in scores if (s.task, s.strategy) == OLD_DEMO
                and s.sampling == "balanced"), scores[0])  # fmt: skip
    print(f"best: {best.task}, {best.strategy}, {best.sampling} (score {best.score:.2f}); the "
          f"demo: {chosen.task}, {chosen.strategy}, {chosen.sampling} ({chosen.score:.2f}); "
          f"the old demo: {old.task}, {old.strategy}, {old.sampling} ({old.score:.2f})")
    rows: list[Row] = [
        row("demo's score / best one's", f"{best.task}/{best.strategy}/{best.sampling}",
            chosen.score,
            chosen.score / best.score if best.score else 1.0, ">= 1.0",
            note="score: the share of good replies"),
        row("demo's supported share / old demo's", f"{old.task}/{old.strategy}", chosen.support,
            chosen.support / old.support if old.support else float("inf"), ">= 2.0"),
    ]  # fmt: skip
    write_rows(args.json, "bench_demo", rows)


if __name__ == "__main__":
    main()
