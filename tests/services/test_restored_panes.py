"""What a resumed rollback needs to show its panes (issue 49, row 5), without an engine: a KV
state is kept with its prompt's segments and handed back with them (a damaged layout is left
out, never trusted), and the thread reads a reply resumed from a state as the answer."""

from __future__ import annotations

import pytest

from app.core.engine.types import KVState
from app.core.jobs.resume import RESUMED_STEP
from app.core.jobs.tasks import JobResult, OutputSpan
from app.services import versions
from app.services.jobs import JobOutcome, JobSpec
from app.store.repository import Repository
from tests.services.outcomes import DOC, FACTS
from tests.store.kv_states import engine_state

pytestmark = pytest.mark.unit

LAYOUT = (("system", 0, 3, None), ("chunk", 3, 4, (0, 40)), ("chunk", 7, 2, (40, 60)),
          ("question", 9, 3, None))  # fmt: skip
PROMPT = 12


def asked(repo: Repository, question: str = "What goes out?") -> int:
    """An ask recorded with its KV state, as the window records one."""
    result = JobResult("ask", "retrieve", "stop", 512, prompt_tokens=PROMPT,
                       outputs=[OutputSpan("answer 1", "The boats.", ((0, 40), (40, 60)), 1,
                                           "stop")],
                       final_prompt=tuple(range(PROMPT)), final_layout=LAYOUT)  # fmt: skip
    state = KVState(tuple(range(PROMPT + 2)), engine_state(PROMPT + 2), 512, "f16", "/m.gguf")
    spec = JobSpec("ask", ("retrieve",), questions=(question,))
    outcome = JobOutcome(spec, results=[result], states={0: state}, engine=FACTS)
    [version] = versions.record_outcome(repo, DOC, outcome, per_question=True).versions
    return version


def test_a_kept_state_comes_back_with_its_prompts_segments(repo: Repository) -> None:
    version = asked(repo)
    spec = versions.resume_spec(repo, repo.get_version(version), model_sha256=FACTS.model_sha256)
    assert spec is not None and spec.prompt_tokens == PROMPT
    assert spec.layout == LAYOUT  # not one pinned block


@pytest.mark.parametrize("damaged", [
    {"layout": [["system", 0, 3, None], ["chunk", 3, 4, [0, 40]]]},  # short of the prompt
    {"layout": [["system", 0, 3, None], ["weird", 3, 9, None]]},  # an unknown kind
    {"layout": [["system", 0, 5, None], ["chunk", 3, 9, [0, 40]]]},  # overlapping
    {"layout": [["system", 0, 3, None], ["chunk", 3, 9, [40, 0]]]},  # a span backwards
    {"layout": [["system", 0, 3, None], ["chunk", 3, 9, "0-40"]]},  # not a span
    {"layout": "system"}, {"layout": [["system", 0, True, None]]}, {},
])  # fmt: skip
def test_a_damaged_or_missing_layout_is_left_out(damaged: dict[str, object]) -> None:
    assert versions.saved_layout(damaged, PROMPT) == ()


def test_the_layout_is_stored_as_json_and_read_back_whole() -> None:
    result = JobResult("ask", "retrieve", "stop", 512, final_layout=LAYOUT)
    assert versions.saved_layout(versions.saved_ring(result), PROMPT) == LAYOUT


def test_the_thread_shows_a_reply_resumed_from_the_state(repo: Repository) -> None:
    version = asked(repo)
    copy = repo.rollback(version)
    resumed = JobResult("ask", "retrieve", "stop", 512,
                        outputs=[OutputSpan(RESUMED_STEP, "The boats, again.", (), 1, "stop")])
    versions.record_resumed(repo, copy, resumed)
    turns = versions.thread(repo, copy.id)
    # the copy asks what its parent asked: one turn, with the reply made again (not "", "…")
    assert [t.answer for t in turns] == ["The boats, again."]
