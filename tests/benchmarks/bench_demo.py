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
- distinct: the share of its sentences a reply says once (greedy decoding can loop, and every
  repeat of a copied sentence is "supported").

The score is their product.

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
# What a summary of the sample must name to say what it is about.
SUBJECT = ("jargon", "hacker", "lexicon", "slang", "glossary")
ONE_PASS = ("head", "middle", "entropy", "retrieve")


@dataclass
class Score:
    task: str
    strategy: str
    sampling: str
    supported: list[float] = field(default_factory=list)
    answered: list[bool] = field(default_factory=list)
    distinct: list[float] = field(default_factory=list)
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
        """What a first impression rests on: replies that hold to the text, say the answer (a
        summary: what the document is about) and do not go round in a loop."""
        return self.support * self.answers * self.variety


def supported_share(output: dict) -> float:
    """The share of a reply's sentences (by characters) that rest on the kept text."""
    spans = output.get("alignment") or []
    total = sum(a["end"] - a["start"] for a in spans)
    held = sum(a["end"] - a["start"] for a in spans if a["source"] is not None)
    return held / total if total else 0.0


def distinct_share(output: dict) -> float:
    """The share of a reply's sentences said once: a greedy reply that loops repeats itself,
    every repeat "supported" by the text it copies."""
    text = output["text"]
    sentences = [re.sub(r"\W+", " ", text[a["start"] : a["end"]].lower()).strip()
                 for a in output.get("alignment") or []]  # fmt: skip
    sentences = [x for x in sentences if x]
    return len(set(sentences)) / len(sentences) if sentences else 0.0


def names_answer(text: str, words: tuple[str, ...]) -> bool:
    low = re.sub(r"\s+", " ", text.lower())
    return any(w in low for w in words)


def run(job: tuple[str, str, str], questions: list[str], args: argparse.Namespace,
        folder: Path) -> Score:  # fmt: skip
    """``job`` (task, strategy, sampling preset) on the sample, asking ``questions``."""
    task, strategy, sampling = job
    argv = ["run", str(sample_document()), "--task", task, "--strategy", strategy,
            "--n-ctx", str(args.n_ctx), "--sampling", sampling, "--json",
            "--max-tokens", str(args.max_tokens), "--db", str(folder / "h.db")]  # fmt: skip
    for q in questions:
        argv += ["--question", q]
    t0 = time.perf_counter()
    proc = subprocess.run([*module_command("app.cli"), *argv], env=child_env(), text=True,
                          capture_output=True, timeout=args.timeout, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{task}/{strategy} failed ({proc.returncode}): {proc.stderr[-400:]}")
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    score = Score(task, strategy, sampling, seconds=time.perf_counter() - t0,
                  prompt_tokens=int(done["prompt_tokens"]))  # fmt: skip
    for i, output in enumerate(done["outputs"]):
        score.supported.append(supported_share(output))
        score.distinct.append(distinct_share(output))
        words = QUESTIONS[questions[i]] if task == "ask" else SUBJECT
        score.answered.append(names_answer(output["text"], words))
    return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ctx", type=int, default=4096, help="context (default: the demo's)")
    parser.add_argument("--sampling", default="deterministic,balanced",
                        help="presets to try, comma-separated")  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=160, help="longest reply")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="how many to ask")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds a run may take")
    args = parse_args(parser, {"questions": 3, "max_tokens": 96})
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
                    s = run((task, strategy, sampling), asked, args, Path(tmp))
                    scores.append(s)
                    print(f"  {sampling:<13} {task:<9} {strategy:<8} supported {s.support:5.0%}"
                          f"  answered {s.answers:5.0%}  distinct {s.variety:5.0%}  "
                          f"score {s.score:.2f}  "
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
            note="score: supported x answered x distinct"),
        row("demo's supported share / old demo's", f"{old.task}/{old.strategy}", chosen.support,
            chosen.support / old.support if old.support else float("inf"), ">= 2.0"),
    ]  # fmt: skip
    write_rows(args.json, "bench_demo", rows)


if __name__ == "__main__":
    main()
