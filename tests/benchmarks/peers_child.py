"""One peer summarization pipeline in a process of its own, for bench_peers.py.

``python tests/benchmarks/peers_child.py NAME --doc PATH --model GGUF --n-ctx N --max-tokens M
--budget B --threads T --out RESULT.json`` runs NAME (``langchain-map-reduce``,
``langchain-refine``, ``llamaindex-tree``) on the document and writes RESULT.json: the summary,
when it was ready (``summary_at``, seconds since the epoch, for the wall time measured from the
parent's start of this process), every prompt text sent to the model, and what llama.cpp did.

What llama.cpp did is counted by wrapping ``llama_cpp.Llama`` methods here, before the library
under test creates its model, so the libraries run unchanged:

- ``create_completion``: every call and its prompt (LangChain's ``LlamaCpp`` and LlamaIndex's
  ``LlamaCPP`` both go through it).
- ``generate``: the prompt's tokens as sent; the next ``eval`` is that prompt's evaluation.
  ``Llama.generate`` keeps the longest common token prefix of the previous call (prompt and
  reply) in the KV cache and evaluates only the rest, so that first ``eval`` gets the prompt
  tokens after prefix reuse: what llama.cpp really evaluated (``prompt_tokens_evaluated``),
  against those sent (``prompt_tokens_sent``). Later ``eval`` calls of the same call feed each
  generated token back.
- ``sample``: each sampled token that is not an end-of-generation token is a generated token.

LangChain and LlamaIndex imports stay in this file (the optional ``bench`` extra): CI imports
neither.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STARTED_AT = time.time()

PEERS = ("langchain-map-reduce", "langchain-refine", "llamaindex-tree")
# what LlamaIndex's tree summarize is asked: its template frames it as a query over the context
TREE_QUERY = "Summarize the document."


@dataclass
class Meter:
    calls: int = 0
    prompt_tokens_sent: int = 0
    prompt_tokens_evaluated: int = 0
    prompt_eval_s: float = 0.0
    generated_tokens: int = 0
    generation_s: float = 0.0  # evaluating the generated tokens back, one at a time
    prompts: list[str] = field(default_factory=list)
    _prompt_next: bool = False


def instrument(meter: Meter) -> None:
    """Wrap the methods of ``llama_cpp.Llama`` that every call goes through (see above)."""
    import llama_cpp  # noqa: PLC0415 (llama.cpp's bindings only in the peer's process)

    cls = llama_cpp.Llama
    create_completion, generate, evaluate, sample = (cls.create_completion, cls.generate,
                                                     cls.eval, cls.sample)  # fmt: skip

    def counted_create_completion(self: Any, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        meter.calls += 1
        text = prompt if isinstance(prompt, str) else self.detokenize(list(prompt)).decode(
            "utf-8", errors="replace")  # fmt: skip
        meter.prompts.append(text)
        return create_completion(self, prompt, *args, **kwargs)

    def counted_generate(self: Any, tokens: Any, *args: Any, **kwargs: Any) -> Any:
        tokens = list(tokens)
        meter.prompt_tokens_sent += len(tokens)
        meter._prompt_next = True  # the generator's first eval is this prompt's (after reuse)
        return generate(self, tokens, *args, **kwargs)

    def counted_eval(self: Any, tokens: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return evaluate(self, tokens)
        finally:
            dt = time.perf_counter() - t0
            if meter._prompt_next:
                meter._prompt_next = False
                meter.prompt_tokens_evaluated += len(tokens)
                meter.prompt_eval_s += dt
            else:
                meter.generation_s += dt

    def counted_sample(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        token = sample(self, *args, **kwargs)
        meter.generation_s += time.perf_counter() - t0
        if not llama_cpp.llama_vocab_is_eog(self._model.vocab, token):
            meter.generated_tokens += 1
        return token

    cls.create_completion = counted_create_completion  # type: ignore[method-assign]
    cls.generate = counted_generate  # type: ignore[method-assign]
    cls.eval = counted_eval  # type: ignore[method-assign]
    cls.sample = counted_sample  # type: ignore[method-assign]


def run_langchain(kind: str, text: str, args: argparse.Namespace, marks: dict[str, float],
                  info: dict[str, Any]) -> str:  # fmt: skip
    """LangChain's summarize chain (map_reduce or refine) over its LlamaCpp LLM."""
    # the optional `bench` extra, imported where it runs
    from langchain_classic.chains.summarize import load_summarize_chain  # noqa: PLC0415
    from langchain_community.llms import LlamaCpp  # noqa: PLC0415
    from langchain_core.documents import Document  # noqa: PLC0415
    from langchain_text_splitters import RecursiveCharacterTextSplitter  # noqa: PLC0415

    marks["imported_at"] = time.time()
    threads = {"n_threads": args.threads} if args.threads else {}  # 0: the library's default
    llm = LlamaCpp(model_path=str(args.model), n_ctx=args.n_ctx, **threads, n_batch=512,
                   model_kwargs={"n_threads_batch": args.threads} if args.threads else {},
                   temperature=0.0, max_tokens=args.max_tokens,
                   repeat_penalty=1.0,  # greedy as the others are (LangChain's default is 1.1)
                   verbose=False)  # fmt: skip
    marks["loaded_at"] = time.time()
    splitter = RecursiveCharacterTextSplitter(chunk_size=args.budget, chunk_overlap=0,
                                              length_function=llm.get_num_tokens)  # fmt: skip
    docs = [Document(page_content=c) for c in splitter.split_text(text)]
    info["chunks"] = len(docs)
    marks["split_at"] = time.time()
    if kind == "map_reduce":
        # token_max: the most tokens of partial summaries one reduce call combines
        chain = load_summarize_chain(llm, chain_type="map_reduce", token_max=args.budget)
    else:
        chain = load_summarize_chain(llm, chain_type="refine")
    return str(chain.invoke({"input_documents": docs})["output_text"])


def run_llamaindex(text: str, args: argparse.Namespace, marks: dict[str, float],
                   info: dict[str, Any]) -> str:  # fmt: skip
    """LlamaIndex's TreeSummarize over its LlamaCPP LLM, offline: the model's own tokenizer
    (not tiktoken's), no embedding model."""
    # the optional `bench` extra, imported where it runs
    from llama_index.core import Settings  # noqa: PLC0415
    from llama_index.core.node_parser import SentenceSplitter  # noqa: PLC0415
    from llama_index.core.response_synthesizers import TreeSummarize  # noqa: PLC0415
    from llama_index.llms.llama_cpp import LlamaCPP  # noqa: PLC0415

    marks["imported_at"] = time.time()
    llm = LlamaCPP(model_path=str(args.model), temperature=0.0, max_new_tokens=args.max_tokens,
                   context_window=args.n_ctx,
                   model_kwargs={"n_batch": 512, **({"n_threads": args.threads,
                                 "n_threads_batch": args.threads} if args.threads else {})},
                   verbose=False)  # fmt: skip
    marks["loaded_at"] = time.time()
    model = llm._model

    def tokenize(s: str) -> list[int]:
        return list(model.tokenize(s.encode("utf-8"), add_bos=False))

    Settings.tokenizer = tokenize
    Settings.llm = llm
    Settings.embed_model = None  # no embeddings: nothing to download
    splitter = SentenceSplitter(chunk_size=args.budget, chunk_overlap=0, tokenizer=tokenize)
    chunks = splitter.split_text(text)
    info["chunks"] = len(chunks)
    marks["split_at"] = time.time()
    return str(TreeSummarize(llm=llm).get_response(TREE_QUERY, chunks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=PEERS)
    parser.add_argument("--doc", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--n-ctx", type=int, required=True)
    parser.add_argument("--max-tokens", type=int, required=True)
    parser.add_argument("--budget", type=int, required=True, help="chunk size in model tokens")
    parser.add_argument("--threads", type=int, required=True,
                        help="n_threads and n_threads_batch; 0: llama-cpp-python's own default")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    text = args.doc.read_text(encoding="utf-8")
    meter = Meter()
    marks: dict[str, float] = {"started_at": STARTED_AT}
    info: dict[str, Any] = {"name": args.name}
    summary, error, code = "", None, 0
    try:
        instrument(meter)
        if args.name == "llamaindex-tree":
            summary = run_llamaindex(text, args, marks, info)
        else:
            kind = "map_reduce" if args.name == "langchain-map-reduce" else "refine"
            summary = run_langchain(kind, text, args, marks, info)
        marks["summary_at"] = time.time()
    except KeyboardInterrupt:
        error, code = "cancelled (Ctrl+C)", 130
    except ImportError as exc:  # the `bench` extra is not installed
        error, code = f"{exc} (install the bench extra: pip install -e '.[bench]')", 1
    except Exception as exc:  # a failed pipeline is a row with its error
        marks["failed_at"] = time.time()
        last = traceback.format_exception_only(exc)[-1].strip()
        error, code = last[:500], 1
        traceback.print_exc()
    data = {**info, **marks, "summary": summary, "error": error,
            **{k: v for k, v in asdict(meter).items() if not k.startswith("_")}}  # fmt: skip
    args.out.write_text(json.dumps(data), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main())
