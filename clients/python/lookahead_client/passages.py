"""Splits text files into passages for retrieval: groups of whole paragraphs
of at most `max_words` words (a paragraph longer than that is cut into
`max_words`-word pieces). Pure Python; no state.
"""

import dataclasses
import os
import re
from typing import Iterator, List

# Paragraphs are separated by lines that are empty or hold only whitespace.
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\f\v\r]*\n")

# Files are read whole; anything bigger is unlikely to be prose.
MAX_FILE_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class Passage:
    # Where it came from: a path relative to the indexed folder (or any
    # caller-chosen name) and the passage's number within that source.
    source: str
    number: int
    # Paragraphs joined by blank lines; whitespace inside each is collapsed.
    text: str

    @property
    def words(self) -> int:
        return len(self.text.split())


def paragraphs(text: str) -> List[str]:
    """The non-empty paragraphs of `text`, whitespace collapsed."""
    result = []
    for block in _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n")):
        words = block.split()
        if words:
            result.append(" ".join(words))
    return result


def split_passages(text: str, source: str = "", max_words: int = 250
                   ) -> List[Passage]:
    """Greedy grouping of `text`'s paragraphs, in order, into passages of at
    most `max_words` words. Every word of `text` lands in exactly one
    passage, in order."""
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1, got {max_words}")
    groups: List[List[str]] = []
    current: List[str] = []
    current_words = 0

    def flush():
        nonlocal current, current_words
        if current:
            groups.append(current)
        current, current_words = [], 0

    for paragraph in paragraphs(text):
        words = paragraph.split()
        if len(words) > max_words:
            # Too long to group: close the current group and cut it up.
            flush()
            for start in range(0, len(words), max_words):
                groups.append([" ".join(words[start:start + max_words])])
            continue
        if current_words + len(words) > max_words:
            flush()
        current.append(paragraph)
        current_words += len(words)
    flush()
    return [Passage(source, i, "\n\n".join(group))
            for i, group in enumerate(groups)]


def _text_files(folder: str) -> Iterator[str]:
    """Regular files below `folder`, sorted, each real file once and under
    its own name: a link to a file inside `folder` is skipped (Debian's
    common-licenses has GPL -> GPL-3 style links)."""
    top = os.path.realpath(folder)
    seen = set()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            real = os.path.realpath(path)
            if os.path.islink(path) and real.startswith(top + os.sep):
                continue
            if real in seen or not os.path.isfile(real):
                continue
            seen.add(real)
            yield path


def load_passages(folder: str, max_words: int = 250) -> List[Passage]:
    """Passages of every text file below `folder`, sources relative to it.
    Skips files that are not UTF-8 text (binary, too big, unreadable).
    Raises FileNotFoundError when `folder` is not a directory."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder} is not a directory")
    result: List[Passage] = []
    for path in _text_files(folder):
        try:
            if os.path.getsize(path) > MAX_FILE_BYTES:
                continue
            with open(path, "rb") as f:
                data = f.read()
            if b"\0" in data:
                continue
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        result.extend(split_passages(text, os.path.relpath(path, folder),
                                     max_words))
    return result
