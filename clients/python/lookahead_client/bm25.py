"""Okapi BM25 ranking over an in-memory list of documents, pure Python.

    index = BM25Index(["first passage ...", "second passage ..."])
    for doc, score in index.search("a question", k=3): ...

score(q, d) = sum over query terms t present in d of
    idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))   (never negative)

An index is immutable after construction; searching is safe from any thread.
"""

import collections
import math
import re
from typing import Dict, Iterable, List, Sequence, Tuple

_WORD = re.compile(r"[a-z0-9]+")

# Question words and function words. Left in, they dominate short questions:
# "what" or "about" are rare in legal text, so their idf is high while they
# say nothing about the topic.
STOPWORDS = frozenset("""
a about above after again all also am an and any are as at be because been
before being below between both but by can could did do does doing down
during each few for from further had has have having he her here hers him
his how i if in into is it its itself just me more most my no nor not now
of off on once only or other our ours out over own same say says she should
so some such tell than that the their theirs them then there these they
this those through to too under until up very was we were what when where
which while who whom why will with would you your yours
""".split())


def stem(word: str) -> str:
    """Harman's "S" stemmer: plurals to singular ("works" -> "work",
    "licenses" -> "license", "copies" -> "copy"), so that a question's
    "Derivative Work" finds a definition of "Derivative Works"."""
    if len(word) <= 3:
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


def tokenize(text: str) -> List[str]:
    """Lower-cased runs of ASCII letters and digits, stopwords dropped,
    plurals stemmed; everything else splits."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class BM25Index:
    """BM25 over `documents` (strings, tokenized with tokenize()).

    k1 (> 0) is how fast repeated terms saturate: higher lets term frequency
    count for longer. b in [0, 1] is how much long documents are penalized:
    0 ignores length, 1 normalizes fully. 1.5 and 0.75 are the usual values.
    """

    def __init__(self, documents: Iterable[str], k1: float = 1.5,
                 b: float = 0.75):
        if k1 <= 0:
            raise ValueError(f"k1 must be > 0, got {k1}")
        if not 0.0 <= b <= 1.0:
            raise ValueError(f"b must be in [0, 1], got {b}")
        self.k1 = k1
        self.b = b
        # postings[term] = [(doc, term frequency in doc)], docs ascending.
        self._postings: Dict[str, List[Tuple[int, int]]] = collections.defaultdict(list)
        self._lengths: List[int] = []
        for doc, text in enumerate(documents):
            terms = tokenize(text)
            self._lengths.append(len(terms))
            for term, tf in collections.Counter(terms).items():
                self._postings[term].append((doc, tf))
        self._postings = dict(self._postings)
        total = sum(self._lengths)
        self._avgdl = total / len(self._lengths) if total else 1.0

    def __len__(self) -> int:
        return len(self._lengths)

    def idf(self, term: str) -> float:
        n = len(self._lengths)
        df = len(self._postings.get(term, ()))
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> List[float]:
        """The BM25 score of every document for `query` (0 if no term hits).
        A term repeated in the query counts once per repetition."""
        result = [0.0] * len(self._lengths)
        for term in tokenize(query):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = self.idf(term)
            for doc, tf in postings:
                norm = 1.0 - self.b + self.b * self._lengths[doc] / self._avgdl
                result[doc] += idf * tf * (self.k1 + 1.0) / (tf + self.k1 * norm)
        return result

    def search(self, query: str, k: int = 1) -> List[Tuple[int, float]]:
        """Up to `k` (document index, score) pairs with score > 0, best
        first; equal scores keep document order."""
        scored = [(doc, s) for doc, s in enumerate(self.scores(query)) if s > 0]
        scored.sort(key=lambda pair: (-pair[1], pair[0]))
        return scored[:k]


def rank(documents: Sequence[str], query: str, k: int = 1,
         **options) -> List[Tuple[int, float]]:
    """One-shot BM25Index(documents, **options).search(query, k)."""
    return BM25Index(documents, **options).search(query, k)
