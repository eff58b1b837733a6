"""Unit tests of lookahead_client.passages: paragraph grouping, long
paragraphs, and loading a folder."""

import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lookahead_client import passages  # noqa: E402


class ParagraphsTest(unittest.TestCase):
    def test_blank_and_whitespace_lines_separate(self):
        text = "one\ntwo  three\n\n  \t \nfour\r\n\r\nfive\n\n\n"
        self.assertEqual(passages.paragraphs(text),
                         ["one two three", "four", "five"])

    def test_empty(self):
        self.assertEqual(passages.paragraphs(""), [])
        self.assertEqual(passages.paragraphs("\n \n\n"), [])
        self.assertEqual(passages.split_passages("  \n\n "), [])


class SplitPassagesTest(unittest.TestCase):
    def test_groups_whole_paragraphs_up_to_the_limit(self):
        text = "a b c\n\nd e\n\nf g h i\n\nj"
        got = passages.split_passages(text, source="doc", max_words=5)
        self.assertEqual([p.text for p in got],
                         ["a b c\n\nd e", "f g h i\n\nj"])
        self.assertEqual([(p.source, p.number) for p in got],
                         [("doc", 0), ("doc", 1)])

    def test_long_paragraph_is_cut(self):
        words = [f"w{i}" for i in range(12)]
        text = "x y\n\n" + " ".join(words) + "\n\nz"
        got = [p.text for p in passages.split_passages(text, max_words=5)]
        self.assertEqual(got, ["x y", "w0 w1 w2 w3 w4", "w5 w6 w7 w8 w9",
                               "w10 w11", "z"])

    def test_bad_limit(self):
        with self.assertRaises(ValueError):
            passages.split_passages("a", max_words=0)

    def test_random_documents_keep_every_word_within_limits(self):
        rng = random.Random(7)
        for trial in range(300):
            max_words = rng.randint(1, 40)
            paras = [" ".join(f"t{trial}w{i}p{j}" for i in range(rng.randint(1, 60)))
                     for j in range(rng.randint(0, 10))]
            separators = ["\n\n", "\n \n", "\n\n\n", "\r\n\r\n"]
            text = "".join(p + rng.choice(separators) for p in paras)
            got = passages.split_passages(text, max_words=max_words)
            self.assertEqual(" ".join(p.text for p in got).split(), text.split(),
                             f"trial {trial}")
            for p in got:
                self.assertGreaterEqual(p.words, 1)
                self.assertLessEqual(p.words, max_words, f"trial {trial}")
            # Greedy: a passage that ends at a paragraph boundary could not
            # have taken the next paragraph as well.
            for a, b in zip(got, got[1:]):
                first_next = b.text.split("\n\n")[0]
                if len(first_next.split()) <= max_words and a.text.split("\n\n")[-1] in paras:
                    self.assertGreater(a.words + len(first_next.split()), max_words,
                                       f"trial {trial}")


class LoadPassagesTest(unittest.TestCase):
    def test_reads_text_files_once_skips_binary_and_links(self):
        with tempfile.TemporaryDirectory() as folder, \
                tempfile.TemporaryDirectory() as elsewhere:
            with open(os.path.join(elsewhere, "outside.txt"), "w") as f:
                f.write("outside words")
            # Followed: its target is not indexed under another name.
            os.symlink(os.path.join(elsewhere, "outside.txt"),
                       os.path.join(folder, "c-link"))
            os.mkdir(os.path.join(folder, "sub"))
            with open(os.path.join(folder, "b.txt"), "w") as f:
                f.write("bravo one\n\nbravo two\n")
            with open(os.path.join(folder, "sub", "a.txt"), "w") as f:
                f.write("alpha\n")
            with open(os.path.join(folder, "blob.bin"), "wb") as f:
                f.write(b"text\0binary")
            with open(os.path.join(folder, "latin1.txt"), "wb") as f:
                f.write("caf\u00e9".encode("latin-1"))
            os.symlink("b.txt", os.path.join(folder, "a-link"))
            got = passages.load_passages(folder, max_words=2)
            self.assertEqual([(p.source, p.number, p.text) for p in got],
                             [("b.txt", 0, "bravo one"), ("b.txt", 1, "bravo two"),
                              ("c-link", 0, "outside words"),
                              (os.path.join("sub", "a.txt"), 0, "alpha")])

    def test_missing_folder(self):
        with self.assertRaises(FileNotFoundError):
            passages.load_passages("/nonexistent/lookahead-docs")


if __name__ == "__main__":
    unittest.main()
