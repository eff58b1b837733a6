#!/usr/bin/env python3
"""Checks that the documentation says only what is true of the tree.

    tools/docs_test.py            # from anywhere; exit 1 on any problem

(a) Links. Every relative link in README.md, docs/*.md and
    bench/results/**/README.md resolves to a file or folder of the tree, and
    a #anchor to a heading of the linked Markdown file (GitHub's slugs).
(b) Commands. Every command quoted in README.md and docs/*.md (in a shell
    code block, or an inline code span that starts with the program) that
    runs one of our programs uses only flags that program has:
      draftsvc, verifysvc, lookahead   their --helpfull (the binaries built
                                       under .bazel/bin; the CLI falls back
                                       to its ABSL_FLAGs when not built)
      tools/*.sh, deploy/*.sh, ...     the flags the script parses (its case
                                       patterns and comparisons), plus the
                                       flags of the Python script it passes
                                       "$@" to
      tools/*.py, bench/*.py, ...      argparse's --help (or, when the
                                       script cannot start here, its
                                       add_argument calls)
      bazel run //pkg:target -- ...    the ABSL_FLAGs of pkg/target.cc
    Flags passed through (--verifysvc_flag=--x, --draftsvc_flag=--x, and
    bench/ab.py's --a_flag, --b_flag, --common_flag) are checked against the
    service they go to. An inline code span that is just a flag
    (`--prefix_cache_mib=0`) must be a flag of one of those programs.
(c) docs/configuration.md lists, under "## verifysvc" and "## draftsvc",
    every flag of that binary (test-only --testing_* flags aside) with the
    binary's current default, and no flag the binary lacks.

Python 3 standard library only. Needs //draftsvc:draftsvc and
//verifysvc:verifysvc built (tools/test.sh has built them when it runs
this).
"""

import argparse
import glob
import os
import re
import subprocess
import sys
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".bazel", "bin")

# abseil's own flags, accepted by every absl binary.
ABSL_BUILTIN = {"help", "helpfull", "helpshort", "helppackage", "version",
                "only_check_args", "flagfile", "fromenv", "tryfromenv",
                "undefok"}
# Outer flags whose value is a flag of a service (bench/run.py, bench/ab.py).
PASS_THROUGH = {"verifysvc_flag": "verifysvc", "common_flag": "verifysvc",
                "a_flag": "verifysvc", "b_flag": "verifysvc",
                "draftsvc_flag": "draftsvc"}
# Code block languages that hold no shell commands.
NOT_SHELL = {"text", "python", "py", "json", "yaml", "yml", "proto", "cpp",
             "c++", "cc", "ini", "toml", "mermaid", "diff"}
# Words that run the next word as the command.
PREFIXES = {"sudo", "env", "exec", "time", "nohup", "command"}

Problem = Tuple[str, int, str]
VERBOSE = False


def rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


# ---------------------------------------------------------------- Markdown


class Doc:
    """One Markdown file: its lines, split into prose and fenced code."""

    def __init__(self, path: str):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.lines = f.read().split("\n")
        # (first line number, language, text) of each fenced block.
        self.blocks: List[Tuple[int, str, str]] = []
        # Line number -> prose text (code blocks blanked).
        self.prose: List[str] = []
        fence: Optional[str] = None
        lang, start, body = "", 0, []
        for number, line in enumerate(self.lines, 1):
            stripped = line.lstrip()
            if fence is None:
                m = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
                if m:
                    fence, lang, start, body = m.group(1), m.group(2), number, []
                    self.prose.append("")
                    continue
                self.prose.append(line)
            else:
                if stripped.startswith(fence):
                    self.blocks.append((start, lang.lower(), "\n".join(body)))
                    fence = None
                else:
                    body.append(line)
                self.prose.append("")

    def headings(self) -> Set[str]:
        slugs: Set[str] = set()
        seen: Dict[str, int] = {}
        for line in self.prose:
            m = re.match(r" {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                slug = github_slug(m.group(2))
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                slugs.add(slug if n == 0 else f"{slug}-{n}")
            for a in re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line):
                slugs.add(a)
        return slugs


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: rendered text, lower case, only word
    characters, spaces and hyphens kept, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*)", "", text)  # emphasis (not _x_ in words)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def strip_inline_code(text: str) -> str:
    return re.sub(r"`[^`]*`", "``", text)


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)")


def git_ignored(path: str) -> bool:
    """True when git ignores path (a build or bench output, say)."""
    out = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT,
                         capture_output=True)
    return out.returncode == 0


def check_links(doc: Doc, cache: Dict[str, Doc]) -> Tuple[int, List[Problem]]:
    problems: List[Problem] = []
    count = 0
    for number, line in enumerate(doc.prose, 1):
        text = strip_inline_code(line)
        targets = LINK.findall(text) + REF_LINK.findall(text)
        for target in targets:
            if re.match(r"[a-zA-Z][\w+.-]*:", target):  # http:, mailto:, ...
                continue
            count += 1
            path, _, anchor = target.partition("#")
            if path:
                full = os.path.normpath(
                    os.path.join(os.path.dirname(doc.path), path))
                if not full.startswith(ROOT + os.sep) and full != ROOT:
                    problems.append((doc.path, number,
                                     f"link {target} leaves the repository"))
                    continue
                if not os.path.exists(full):
                    problems.append((doc.path, number,
                                     f"link {target}: {rel(full)} does not exist"))
                    continue
                if git_ignored(full):
                    # A fresh clone (CI) lacks it even where this tree has it.
                    problems.append((doc.path, number,
                                     f"link {target}: {rel(full)} is not in git "
                                     "(generated or ignored); name it in code "
                                     "instead"))
                    continue
            else:
                full = doc.path
            if anchor:
                if not full.endswith(".md") or os.path.isdir(full):
                    continue
                if full not in cache:
                    cache[full] = Doc(full)
                if anchor.lower() not in cache[full].headings():
                    problems.append((doc.path, number,
                                     f"link {target}: no heading #{anchor} "
                                     f"in {rel(full)}"))
    return count, problems


# ------------------------------------------------------------ Shell words


def split_commands(text: str) -> Iterator[Tuple[int, List[str]]]:
    """Splits shell text into commands (lists of words, quotes removed),
    each with its line offset: at unquoted newlines (not after a
    backslash), ;, &, | and &&/||; # starts a comment after a blank."""
    words: List[str] = []
    word: Optional[str] = None
    quote = ""
    line = 0
    start_line = 0
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"' and i + 1 < len(text):
                i += 1
                word += text[i]
            else:
                if c == "\n":
                    line += 1
                word += c
            i += 1
            continue
        if c in "'\"":
            quote = c
            word = word or ""
        elif c == "\\" and i + 1 < len(text) and text[i + 1] == "\n":
            i += 1
            line += 1
        elif c == "\\" and i + 1 < len(text):
            i += 1
            word = (word or "") + text[i]
        elif c == "#" and word is None:
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif c in " \t":
            if word is not None:
                words.append(word)
                word = None
        elif c in "\n;&|()":
            if word is not None:
                words.append(word)
                word = None
            if words:
                yield start_line, words
            words = []
            if c == "\n":
                line += 1
            start_line = line
        else:
            word = (word or "") + c
        i += 1
    if word is not None:
        words.append(word)
    if words:
        yield start_line, words


# ---------------------------------------------------------- Flag sources


class Flags:
    """The flags each program has, found once per program."""

    def __init__(self):
        self.cache: Dict[str, Optional[Dict[str, str]]] = {}
        self.help_text: Dict[str, str] = {}
        self.errors: List[str] = []

    # name -> default ("" when none), from an absl binary's --helpfull.
    def absl_binary(self, binary: str, own_only: bool = False) -> Optional[Dict[str, str]]:
        key = f"absl:{binary}:{own_only}"
        if key in self.cache:
            return self.cache[key]
        result: Optional[Dict[str, str]] = None
        if os.access(binary, os.X_OK):
            if binary not in self.help_text:
                out = subprocess.run([binary, "--helpfull"],
                                     capture_output=True, text=True,
                                     timeout=60)
                self.help_text[binary] = out.stdout + out.stderr
            result = parse_absl_help(self.help_text[binary], own_only)
        self.cache[key] = result
        return result

    def service(self, name: str, own_only: bool = False) -> Dict[str, str]:
        binary = os.path.join(BIN, name, name)
        flags = self.absl_binary(binary, own_only)
        if flags is None:
            message = (f"{rel(binary)} is not built: run bazel build "
                       f"//{name}:{name}")
            if message not in self.errors:
                self.errors.append(message)
            return {}
        return flags

    def absl_sources(self, sources: List[str]) -> Dict[str, str]:
        flags: Dict[str, str] = {}
        for source in sources:
            with open(source, encoding="utf-8") as f:
                text = f.read()
            for name in re.findall(r"ABSL_FLAG\(\s*[^,]+,\s*(\w+)\s*,", text):
                flags[name] = ""
        return flags

    def cli(self) -> Dict[str, str]:
        binary = os.path.join(BIN, "clients", "cli", "lookahead")
        flags = self.absl_binary(binary)
        if flags is None:
            flags = self.absl_sources(
                glob.glob(os.path.join(ROOT, "clients", "cli", "*.cc")))
        return flags

    def bazel_target(self, label: str) -> Optional[Dict[str, str]]:
        m = re.match(r"//([\w/.-]*):([\w.-]+)$", label)
        if not m:
            return None
        source = os.path.join(ROOT, m.group(1), m.group(2) + ".cc")
        if not os.path.exists(source):
            return None
        flags = self.absl_sources([source])
        return flags or None  # no absl flags: its arguments are positional

    def python(self, script: str) -> Dict[str, str]:
        key = f"py:{script}"
        if key in self.cache:
            return self.cache[key] or {}
        flags: Dict[str, str] = {}
        with open(script, encoding="utf-8") as f:
            text = f.read()
        ok = False
        if "argparse" in text:  # never run a script that ignores --help
            try:
                out = subprocess.run([sys.executable, script, "--help"],
                                     capture_output=True, text=True,
                                     timeout=60, cwd=ROOT)
                ok = out.returncode == 0
            except subprocess.TimeoutExpired:
                pass
        if ok:
            for name in re.findall(r"(?<![\w-])--([A-Za-z][\w-]*)", out.stdout):
                flags[name] = ""
        else:  # it cannot start here (a venv-only import): read the source
            for call in re.finditer(r"add_argument\(", text):
                head = re.split(r",\s*\w+\s*=", text[call.end():call.end() + 400])[0]
                for name in re.findall(r"[\"']--([A-Za-z][\w-]*)[\"']", head):
                    flags[name] = ""
        flags["help"] = ""
        self.cache[key] = flags
        return flags

    def shell(self, script: str) -> Dict[str, str]:
        key = f"sh:{script}"
        if key in self.cache:
            return self.cache[key] or {}
        with open(script, encoding="utf-8") as f:
            text = f.read()
        code = "\n".join(l for l in text.split("\n")
                         if not l.lstrip().startswith("#"))
        flags: Dict[str, str] = {}
        # case patterns: --x) --x=*) --x|--y) "--x")
        for name in re.findall(
                r"(?:^|[\s|(\"])--([A-Za-z][\w-]*)(?:=\*)?\"?\s*(?=[|)])",
                code, re.M):
            flags[name] = ""
        # comparisons: == --x, != "--x", = --x
        for name in re.findall(r"[!=]=?\s*\"?--([A-Za-z][\w-]*)", code):
            flags[name] = ""
        # "$@" handed to a Python script of ours.
        joined = code.replace("\\\n", " ")
        for line in joined.split("\n"):
            if '"$@"' in line:
                for py in re.findall(r"([\w./-]+\.py)\b", line):
                    path = os.path.join(ROOT, py)
                    if os.path.exists(path):
                        flags.update(self.python(path))
        self.cache[key] = flags
        return flags


def parse_absl_help(text: str, own_only: bool) -> Dict[str, str]:
    flags: Dict[str, str] = {}
    source = ""
    current = None
    body = ""

    def finish():
        if current is not None:
            m = re.search(r"; default: (.*);$", body)
            flags[current] = m.group(1) if m else ""

    for line in text.split("\n"):
        m = re.match(r"\s*Flags from (\S+):", line)
        if m:
            finish()
            current = None
            source = m.group(1)
            continue
        m = re.match(r"    --(\w+) \((.*)$", line)
        if m:
            finish()
            current, body = None, ""
            if own_only and ("absl/" in source or source.startswith("external")):
                continue
            current, body = m.group(1), m.group(2)
            continue
        if current is not None and line.startswith("      "):
            body += " " + line.strip()
    finish()
    if not own_only:
        for name in ABSL_BUILTIN:
            flags.setdefault(name, "")
    return flags


# ------------------------------------------------------------- Commands


def program_flags(words: List[str], flags: Flags) -> Tuple[Optional[str], Optional[Dict[str, str]], List[str]]:
    """Which of our programs `words` runs, its flags, and its arguments;
    (None, None, []) if it is none of ours."""
    i = 0
    while i < len(words) and (re.match(r"\w+=", words[i]) or words[i] in PREFIXES):
        i += 1
    if i >= len(words):
        return None, None, []
    program = words[i]
    args = words[i + 1:]
    base = os.path.basename(program)
    if re.search(r"(^|/)python[\d.]*$", program) and args:
        program, args = args[0], args[1:]
        base = os.path.basename(program)
    if program == "bazel" and args and args[0] == "run":
        label = next((a for a in args if a.startswith("//")), None)
        if label is None or "--" not in args:
            return None, None, []
        target_flags = flags.bazel_target(label)
        if target_flags is None:
            return None, None, []
        return label, target_flags, args[args.index("--") + 1:]
    if base in ("draftsvc", "verifysvc") and (
            program == base or program.endswith(f"/{base}/{base}")):
        return base, flags.service(base), args
    if program in ("lookahead", ".bazel/bin/clients/cli/lookahead"):
        return "lookahead", flags.cli(), args
    m = re.match(r"\.bazel/bin/([\w/.-]+)/([\w.-]+)$", program)
    if m:
        target_flags = flags.bazel_target(f"//{m.group(1)}:{m.group(2)}")
        if target_flags is None:
            return None, None, []
        return program, target_flags, args
    path = os.path.join(ROOT, program)
    if "/" in program and os.path.isfile(path):
        if program.endswith(".sh"):
            return program, flags.shell(path), args
        if program.endswith(".py"):
            return program, flags.python(path), args
    return None, None, []


def check_command(words: List[str], flags: Flags) -> Tuple[int, List[str]]:
    """Returns (flags checked, problems) for one command."""
    name, known, args = program_flags(words, flags)
    if name is None or known is None:
        return 0, []
    if VERBOSE:
        print(f"  {name}: {' '.join(a for a in args if a.startswith('--'))}")
    problems = []
    checked = 0
    is_absl = name in ("draftsvc", "verifysvc", "lookahead") or name.startswith(("//", ".bazel/"))
    for arg in args:
        if arg == "--":
            break
        if not arg.startswith("--") or arg == "--":
            continue
        flag, _, value = arg[2:].partition("=")
        checked += 1
        ok = flag in known or (is_absl and flag.startswith("no") and flag[2:] in known)
        if not ok:
            problems.append(f"{name} has no flag --{flag}")
            continue
        if flag in PASS_THROUGH and value.startswith("--"):
            service = PASS_THROUGH[flag]
            inner = value[2:].partition("=")[0]
            checked += 1
            service_flags = flags.service(service)
            if service_flags and inner not in service_flags and not (
                    inner.startswith("no") and inner[2:] in service_flags):
                problems.append(f"--{flag}={value}: {service} has no flag --{inner}")
    return checked, problems


def is_command_start(word: str) -> bool:
    return bool(re.match(
        r"(draftsvc|verifysvc|lookahead|bazel run|\.bazel/bin/|\.bazel-cuda/bin/"
        r"|tools/|bench/|deploy/|clients/|/usr/bin/python3 |python3 )", word))


def check_commands(doc: Doc, flags: Flags, all_flags: Set[str]) -> Tuple[int, int, List[Problem]]:
    problems: List[Problem] = []
    commands = 0
    checked = 0
    for start, lang, body in doc.blocks:
        if lang in NOT_SHELL:
            continue
        for offset, words in split_commands(body):
            words = [w[2:] if w.startswith("$ ") else w for w in words]
            if words and words[0] == "$":
                words = words[1:]
            n, found = check_command(words, flags)
            if n or program_flags(words, flags)[0]:
                commands += 1
            checked += n
            for message in found:
                problems.append((doc.path, start + 1 + offset, message))
    # Inline code spans in prose (they may wrap lines).
    text = "\n".join(doc.prose)
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        span = m.group(1).replace("\n", " ").strip()
        number = text.count("\n", 0, m.start()) + 1
        if span.startswith("--"):
            flag = span[2:].partition("=")[0].partition(" ")[0]
            flag = re.sub(r"[^\w-].*$", "", flag)
            if flag and flag not in all_flags and not (
                    flag.startswith("no") and flag[2:] in all_flags):
                problems.append((doc.path, number,
                                 f"`{span}`: no program of ours has --{flag}"))
            checked += 1
            continue
        if not is_command_start(span):
            continue
        for _, words in split_commands(span):
            n, found = check_command(words, flags)
            if n or program_flags(words, flags)[0]:
                commands += 1
            checked += n
            for message in found:
                problems.append((doc.path, number, message))
    return commands, checked, problems


def known_flags(flags: Flags) -> Set[str]:
    """Every flag of our programs, for flags quoted alone in prose."""
    names: Set[str] = set()
    names.update(flags.service("draftsvc"))
    names.update(flags.service("verifysvc"))
    names.update(flags.cli())
    for pattern in ("tools/*.sh", "deploy/*.sh"):
        for script in glob.glob(os.path.join(ROOT, pattern)):
            names.update(flags.shell(script))
    for pattern in ("tools/*.py", "bench/*.py", "clients/python/examples/*.py"):
        for script in glob.glob(os.path.join(ROOT, pattern)):
            if not script.endswith("_test.py"):
                names.update(flags.python(script))
    for source in glob.glob(os.path.join(ROOT, "*", "**", "*.cc"), recursive=True):
        if "/.bazel" in source or "/third_party/" in source:
            continue
        names.update(flags.absl_sources([source]))
    return names


# ------------------------------------------------------- configuration.md


def normalize_default(text: str) -> str:
    text = text.strip().strip("`").strip()
    if text in ('""', "(empty)", "-", "empty"):
        return ""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return text


def check_configuration(doc: Doc, flags: Flags) -> Tuple[int, List[Problem]]:
    problems: List[Problem] = []
    rows = 0
    section = None
    listed: Dict[str, Set[str]] = {"draftsvc": set(), "verifysvc": set()}
    section_line: Dict[str, int] = {}
    for number, line in enumerate(doc.prose, 1):
        m = re.match(r"## (\w+)\s*$", line)
        if m:
            section = m.group(1) if m.group(1) in listed else None
            if section:
                section_line[section] = number
            continue
        if section is None:
            continue
        m = re.match(r"\|\s*`--(\w+)`\s*\|([^|]*)\|", line)
        if not m:
            continue
        rows += 1
        flag, default = m.group(1), normalize_default(m.group(2))
        listed[section].add(flag)
        actual = flags.service(section, own_only=True)
        if not actual:
            continue
        if flag not in actual:
            problems.append((doc.path, number, f"{section} has no flag --{flag}"))
        elif normalize_default(actual[flag]) != default:
            problems.append((doc.path, number,
                             f"{section} --{flag}: default is "
                             f"{actual[flag] or '(empty)'}, the table says "
                             f"{default or '(empty)'}"))
    for service, names in listed.items():
        actual = flags.service(service, own_only=True)
        if not actual:
            continue
        if service not in section_line:
            problems.append((doc.path, 1, f"no '## {service}' section"))
            continue
        for flag in sorted(set(actual) - names):
            if flag.startswith("testing_"):
                continue
            problems.append((doc.path, section_line[service],
                             f"{service} --{flag} (default "
                             f"{actual[flag] or '(empty)'}) is not listed"))
    return rows, problems


# ------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="print every command whose flags are checked")
    global VERBOSE
    VERBOSE = parser.parse_args().verbose
    link_docs = [os.path.join(ROOT, "README.md")]
    link_docs += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    link_docs += sorted(glob.glob(os.path.join(ROOT, "bench", "results", "**", "README.md"),
                                  recursive=True))
    command_docs = [os.path.join(ROOT, "README.md")]
    command_docs += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))

    cache: Dict[str, Doc] = {}
    problems: List[Problem] = []
    links = 0
    for path in link_docs:
        cache[path] = cache.get(path) or Doc(path)
        n, found = check_links(cache[path], cache)
        links += n
        problems += found

    flags = Flags()
    all_flags = known_flags(flags)
    commands = checked = 0
    for path in command_docs:
        n, c, found = check_commands(cache[path], flags, all_flags)
        commands += n
        checked += c
        problems += found

    rows = 0
    config = os.path.join(ROOT, "docs", "configuration.md")
    if os.path.exists(config):
        rows, found = check_configuration(cache[config], flags)
        problems += found
    else:
        problems.append((config, 0, "missing"))

    for message in flags.errors:
        print(f"docs_test: {message}")
    for path, number, message in problems:
        print(f"{rel(path)}:{number}: {message}")
    print(f"docs_test: {len(link_docs)} files, {links} links; "
          f"{commands} commands and {checked} flags in {len(command_docs)} "
          f"files; {rows} flag rows in docs/configuration.md: "
          + ("OK" if not problems and not flags.errors else
             f"{len(problems) + len(flags.errors)} problems"))
    return 1 if problems or flags.errors else 0


if __name__ == "__main__":
    sys.exit(main())
