"""The benchmark's workloads, built deterministically from the cache that
fetch_workloads.py fills. Each workload has a warm-up split, run first with
drafts on to fill the namespace's global trie, and a measured split; the two
never share a prompt. Items are shuffled with a fixed seed per workload, then
the first `warmup` become the warm-up split and the next `limit` the
measured one.

  rag          a passage (<= 200 words, >= 80) of a Debian document and a
               question about it, alternately
                 What does the passage say about "<phrase>"?
                 Quote the sentence of the passage that contains "<phrase>".
               where <phrase> is the passage's most salient word pair: two
               adjacent non-stopwords, scored by count in the passage times
               inverse document frequency over all passages (TF-IDF).
  chat         the chat questions (MT-Bench first turns, or the Python FAQ).
  code         HumanEval prompts, as raw text to continue (no chat template).
  adversarial  what really defeats drafts: random token soup (64 ids drawn
               uniformly from [256, vocab_size), sent as token ids) sampled
               at temperature 1.5 with a seed per prompt, so the output is
               near-random too and EDL stays near 1. (The earlier set, greedy
               soup and Ethiopic pseudo-text, let the model fall into loops
               the trie learns: EDL 1.7-5.3, so it tested nothing.)
"""

import dataclasses
import json
import math
import os
import random
import re
import sys
import zlib
from collections import Counter
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "clients", "python"))
from lookahead_client import passages  # noqa: E402  (pure Python)

NAMES = ("rag", "chat", "code", "adversarial")
RAG_INSTRUCTION = "Answer the question using the passage."
_STOPWORDS = frozenset("""
a about above after again all also an and any are as at be because been
before being below between both but by can could did do does doing done
each either etc for from further had has have having he her here him his
how however i if in into is it its itself may me might more most must my
no nor not of off on once only or other otherwise our out over own same
shall she should so some such than that the their them then there these
they this those through to too under until up upon very was we were what
when where which while who whom why will with would you your
""".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")


@dataclasses.dataclass(frozen=True)
class Prompt:
    id: str
    # Client.generate's input: exactly one of prompt=, chat=, tokens=.
    request: Dict


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    description: str
    warmup: List[Prompt]
    measured: List[Prompt]


def _split(name, description, prompts, warmup, limit):
    prompts = list(prompts)
    random.Random(f"bench-{name}").shuffle(prompts)
    if len(prompts) < warmup + limit:
        raise ValueError(f"workload {name} has {len(prompts)} prompts, fewer "
                         f"than warmup {warmup} + limit {limit}")
    return Workload(name, description, prompts[:warmup],
                    prompts[warmup:warmup + limit])


def _read_jsonl(path):
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: run "
                                "bench/fetch_workloads.py")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def candidate_phrases(text):
    """Counts of `text`'s candidate phrases (two adjacent words, one space
    apart, neither a stopword nor shorter than 3 letters), keyed by their
    lowercase words, each with its first spelling in `text`."""
    counts, spelling = Counter(), {}
    words = list(_WORD.finditer(text))
    for a, b in zip(words, words[1:]):
        key = (a.group().lower(), b.group().lower())
        if (text[a.end():b.start()] != " " or min(map(len, key)) < 3
                or key[0] in _STOPWORDS or key[1] in _STOPWORDS):
            continue
        counts[key] += 1
        spelling.setdefault(key, text[a.start():b.end()])
    return counts, spelling


def salient_phrase(text, document_frequency, documents):
    """The candidate phrase of `text` with the highest TF-IDF (the first on a
    tie), as spelled in `text`; None if it has none. `document_frequency`
    counts the passages, of `documents`, that hold each candidate."""
    counts, spelling = candidate_phrases(text)
    if not counts:
        return None
    best = max(counts, key=lambda k: counts[k] * math.log(
        documents / document_frequency[k]))
    return spelling[best]


def rag_prompts(folder):
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder} is missing: run "
                                "bench/fetch_workloads.py")
    corpus = [p for p in passages.load_passages(folder, max_words=200)
              if p.words >= 80]
    document_frequency = Counter()
    for p in corpus:
        document_frequency.update(candidate_phrases(p.text)[0].keys())
    prompts = []
    for p in corpus:
        phrase = salient_phrase(p.text, document_frequency, len(corpus))
        if phrase is None:
            continue
        if len(prompts) % 2 == 0:
            question = f'What does the passage say about "{phrase}"?'
        else:
            question = ("Quote the sentence of the passage that contains "
                        f'"{phrase}".')
        content = f"{RAG_INSTRUCTION}\n\nPassage:\n{p.text}\n\nQuestion: {question}"
        prompts.append(Prompt(f"{p.source}#{p.number}",
                              {"chat": [{"role": "user", "content": content}]}))
    return prompts


def chat_prompts(path):
    return [Prompt(r["id"], {"chat": [{"role": "user", "content": r["question"]}]})
            for r in _read_jsonl(path)]


def code_prompts(path):
    return [Prompt(r["id"], {"prompt": r["prompt"]}) for r in _read_jsonl(path)]


ADVERSARIAL_TEMPERATURE = 1.5


def adversarial_prompts(vocab_size, count=64):
    rng = random.Random("bench-adversarial")
    return [Prompt(f"soup-{i}", {
        "tokens": [rng.randrange(256, vocab_size) for _ in range(64)],
        "temperature": ADVERSARIAL_TEMPERATURE, "seed": 1000 + i})
        for i in range(count)]


def sampled(workload, temperature):
    """`workload` with every prompt sampled at `temperature`, seeded per
    prompt (a stable hash of its id, so that every mode and every run
    draws the same tokens); prompts that set their own temperature (the
    adversarial soup) keep theirs. Seeded sampling is lossless too: each
    drafted output must still equal plain decoding's."""
    def one(prompt):
        if "temperature" in prompt.request:
            return prompt
        seed = 1 + zlib.crc32(prompt.id.encode()) % (2 ** 31 - 1)
        return Prompt(prompt.id, dict(prompt.request, temperature=temperature,
                                      seed=seed))
    return dataclasses.replace(
        workload, warmup=[one(p) for p in workload.warmup],
        measured=[one(p) for p in workload.measured])


def load(cache, names, vocab_size, warmup, limit):
    """The workloads `names` (a subset of NAMES), in that order."""
    builders = {
        "rag": lambda: (rag_prompts(os.path.join(cache, "rag")),
                        "passages of Debian documents with generated questions"),
        "chat": lambda: (chat_prompts(os.path.join(cache, "chat.jsonl")),
                         "chat questions, one user turn"),
        "code": lambda: (code_prompts(os.path.join(cache, "code.jsonl")),
                         "HumanEval prompts, raw continuation"),
        "adversarial": lambda: (adversarial_prompts(vocab_size),
                                "random token soup sampled at temperature 1.5"),
    }
    result = []
    for name in names:
        if name not in builders:
            raise ValueError(f"unknown workload {name!r}; pick from {NAMES}")
        prompts, description = builders[name]()
        result.append(_split(name, description, prompts, warmup, limit))
    return result
