#!/usr/bin/python3
"""Checks the layering rules of the source tree (issue 13's reshape):

- nothing under engine/, verifysvc/serving/ or verifysvc/drafts/ includes a
  generated *.pb.h (transport stays at the edges: verifysvc/api/ and
  verifysvc/draftsvc_client/);
- no engine/ source includes a verifysvc/ or draftsvc/ header, and no
  draftsvc/ source includes a verifysvc/ header (arrows point down);
- draftsvc's layers point down too (DRAFTSVC_LAYERS, lowest first):
  storage/ < sources/ (assistant/ within) < mix/ < index/ < service/ <
  main.cc and bench/; a file includes draftsvc headers of its own layer or
  lower only, and only tests include draftsvc/testing/; nothing below
  service/ includes a generated *.pb.h; outside sources/assistant/ (tests
  and benchmarks aside) draftsvc includes of engine/ only the torch-free
  ENGINE_TORCH_FREE headers;
- no function in verifysvc/serving/ or in draftsvc's production code
  (tests, bench/ and testing/ aside) is longer than 80 lines, and no
  draftsvc production file is longer than 700 lines, except what
  LENGTH_EXCEPTIONS names, each with its reason (the debt, visible);
- verifysvc/serving/scheduler.{h,cc} name no draft source (the tries, the
  n-gram pool, the Jacobi window, the assistant, draftsvc): the scheduler
  drafts through verifysvc/drafts/ only;
- verifysvc/main.cc is under 150 lines.

With --bazel it also asks Bazel (cquery) that //draftsvc/... and //engine/... do not
depend on any //verifysvc target, that nothing test-only (testonly targets,
//draftsvc/testing, //engine/testing, targets named for faults, fakes or
mocks) is linked into the production binaries, and that the draftsvc
binary links no LibTorch (only its assistant plugin does). Exit status 1
on any violation.

    tools/layering_test.py [--bazel]
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_PROTO = ("engine", "verifysvc/serving", "verifysvc/drafts",
            "draftsvc/storage", "draftsvc/sources", "draftsvc/mix",
            "draftsvc/index")
# draftsvc's layers, lowest first: a file may include draftsvc headers of
# its own layer or a lower one. Folders not named here (draftsvc/ itself:
# main.cc; bench/) are above them all.
DRAFTSVC_LAYERS = ("draftsvc/storage", "draftsvc/sources", "draftsvc/mix",
                   "draftsvc/index", "draftsvc/service")
# What of engine/ draftsvc may include outside sources/assistant/ (the
# plugin, the only part that links the engine's model and LibTorch).
ENGINE_TORCH_FREE = ("engine/model/sampler.h", "engine/model/draft_tree.h",
                     "engine/gguf/model_files.h")
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 700  # draftsvc production files
MAX_MAIN_LINES = 150
# Known debt: "path" (a file over MAX_FILE_LINES) or "path:Name" (a function
# over MAX_FUNCTION_LINES whose signature contains Name) -> the reason it is
# allowed for now. An entry that no longer exceeds is reported so it can go.
LENGTH_EXCEPTIONS = {
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(folder):
    for base, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in files:
            if name.endswith((".h", ".cc", ".cu", ".cuh", ".inc")):
                path = os.path.join(base, name)
                yield os.path.relpath(path, ROOT)


def includes(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def include_violations():
    problems = []
    for folder in NO_PROTO:
        for path in sources(folder):
            for inc in includes(path):
                if inc.endswith(".pb.h"):
                    problems.append(f"{path} includes generated {inc}")
    for path in sources("engine"):
        for inc in includes(path):
            if inc.startswith(("verifysvc/", "draftsvc/")):
                problems.append(f"{path} (engine) includes {inc}")
    for path in sources("draftsvc"):
        for inc in includes(path):
            if inc.startswith("verifysvc/"):
                problems.append(f"{path} (draftsvc) includes {inc}")
    return problems + draftsvc_layer_violations()


def draftsvc_layer(path):
    """The index of `path`'s layer in DRAFTSVC_LAYERS; len() above them."""
    for i, folder in enumerate(DRAFTSVC_LAYERS):
        if path.startswith(folder + "/"):
            return i
    return len(DRAFTSVC_LAYERS)


def draftsvc_layer_violations():
    problems = []
    order = " < ".join(f.split("/")[1] for f in DRAFTSVC_LAYERS)
    torch_free = ", ".join(ENGINE_TORCH_FREE)
    for path in sources("draftsvc"):
        test = path.endswith("_test.cc")
        testing = path.startswith("draftsvc/testing/")
        bench = path.startswith("draftsvc/bench/")
        layer = draftsvc_layer(path)
        for inc in includes(path):
            if inc.startswith("draftsvc/testing/"):
                if not (test or testing):
                    problems.append(f"{path} (production) includes test-only "
                                    f"{inc}")
            elif inc.startswith("draftsvc/") and not testing:
                if draftsvc_layer(inc) > layer:
                    problems.append(f"{path} includes {inc}, a layer above "
                                    f"it (draftsvc: {order})")
            if (inc.startswith("engine/") and inc not in ENGINE_TORCH_FREE
                    and not (test or testing or bench) and
                    not path.startswith("draftsvc/sources/assistant/")):
                problems.append(f"{path} includes {inc}: only "
                                f"draftsvc/sources/assistant/ uses the "
                                f"engine beyond {torch_free}")
    return problems


def long_functions(path):
    """Yields (signature, first line, length) of every top-level function
    longer than MAX_FUNCTION_LINES: a signature starting at column 0 (not a
    namespace, class, struct, enum, preprocessor line or comment), through
    the line that opens its body, to the next line that is exactly '}'."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if (line[:1] in ("", " ", "}", "#", "/", "{") or
                re.match(r"(namespace|class|struct|enum|union|extern|using|"
                         r"template|ABSL_FLAG)\b", line)):
            i += 1
            continue
        # A signature: find where it ends (body or declaration).
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith(("{", ";", "{}")):
            j += 1
        if j >= len(lines) or lines[j].rstrip().endswith(";"):
            i = j + 1
            continue
        if lines[j].rstrip().endswith("{}"):  # an empty body
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and not (lines[k] == "}" or
                                       lines[k].startswith("}  //")):
            k += 1
        length = k - i + 1
        if length > MAX_FUNCTION_LINES:
            yield line.strip(), i + 1, length
        i = k + 1


# The scheduler's files, and the words that name a draft source. A word is
# a lower-case run or a capitalized one inside an identifier (kTrie ->
# "k", "trie"; JacobiWindow -> "jacobi", "window"), so "retrieve" or
# "tries" (the verb) do not match.
SCHEDULER_FILES = ("verifysvc/serving/scheduler.h",
                   "verifysvc/serving/scheduler.cc")
SOURCE_WORDS = {"jacobi", "assistant", "assistants", "trie", "ngram",
                "ngrams", "draftsvc"}
WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def source_names(text):
    """Yields (line number, word) for every draft source word in `text`,
    "n-gram" included."""
    for number, line in enumerate(text.split("\n"), 1):
        if re.search(r"\bn-grams?\b", line, re.I):
            yield number, "n-gram"
        for word in WORD.findall(line):
            if word.lower() in SOURCE_WORDS:
                yield number, word


def scheduler_violations():
    problems = []
    for path in SCHEDULER_FILES:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for line, word in source_names(f.read()):
                problems.append(f"{path}:{line}: names a draft source "
                                f"({word!r}); draft through "
                                "verifysvc/drafts/ (SequenceDrafter)")
    return problems


# draftsvc's RPC layer drives the index only; the index drives every source
# (the assistant through draftsvc/index/session_source.h).
RPC_FILES = ("draftsvc/service/rpc_handlers.h",
             "draftsvc/service/rpc_handlers.cc")
RPC_SOURCE_NAMES = re.compile(
    r"AssistantSource|assistant_source\.h|AssistantEngine|AssistantDrafter|"
    r"TokenTrie|NgramPool|assistant_->")


def rpc_violations():
    problems = []
    for path in RPC_FILES:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for number, line in enumerate(f.read().split("\n"), 1):
                m = RPC_SOURCE_NAMES.search(line)
                if m:
                    problems.append(f"{path}:{number}: drives a source by "
                                    f"name ({m.group(0)!r}); go through the "
                                    "index (draftsvc/index/session_source.h)")
    return problems


def draftsvc_production(path):
    """Whether `path` is draftsvc production code (not a test, a benchmark
    or draftsvc/testing/)."""
    return (path.startswith("draftsvc/") and not path.endswith("_test.cc")
            and not path.startswith(("draftsvc/bench/", "draftsvc/testing/")))


def line_count(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return len(f.read().rstrip("\n").split("\n"))


def function_exception(path, name):
    """The LENGTH_EXCEPTIONS key that allows function `name` of `path`, if
    any."""
    for key in LENGTH_EXCEPTIONS:
        file, _, function = key.partition(":")
        if file == path and function and function in name:
            return key
    return None


def length_violations(used_exceptions=None):
    """Problems with function and file lengths; adds the LENGTH_EXCEPTIONS
    keys that allowed something to `used_exceptions`."""
    used = used_exceptions if used_exceptions is not None else set()
    problems = []
    checked = [p for p in sources("verifysvc/serving")
               if p.endswith(".cc") and not p.endswith("_test.cc")]
    checked += sorted(p for p in sources("draftsvc") if draftsvc_production(p))
    for path in checked:
        for name, line, length in long_functions(path):
            key = function_exception(path, name)
            if key is not None:
                used.add(key)
                continue
            problems.append(f"{path}:{line}: {name!r} is {length} lines "
                            f"(at most {MAX_FUNCTION_LINES})")
        if draftsvc_production(path) and line_count(path) > MAX_FILE_LINES:
            if path in LENGTH_EXCEPTIONS:
                used.add(path)
                continue
            problems.append(f"{path} is {line_count(path)} lines (at most "
                            f"{MAX_FILE_LINES} for draftsvc production files)")
    main_lines = line_count("verifysvc/main.cc")
    if main_lines >= MAX_MAIN_LINES:
        problems.append(f"verifysvc/main.cc is {main_lines} lines "
                        f"(under {MAX_MAIN_LINES})")
    return problems


def bazel_violations():
    problems = []
    for universe in ("//draftsvc/...", "//engine/..."):
        query = f"deps({universe}) intersect //verifysvc/..."
        # cquery resolves select()s for this build (a plain query would
        # also follow the CUDA build's branch and its external LibTorch).
        out = subprocess.run(["bazel", "cquery", query, "--output=label"],
                             cwd=ROOT, capture_output=True, text=True)
        labels = [line.split()[0] for line in out.stdout.splitlines()
                  if line.startswith("//")]
        if out.returncode != 0:
            problems.append(f"bazel cquery {query!r} failed: "
                            f"{out.stderr[-500:]}")
        elif labels:
            problems.append(f"{universe} depends on verifysvc: "
                            + ", ".join(labels[:5]))
    problems += production_violations()
    return problems


# What ships, and what must never be inside it.
PRODUCTION = ("//draftsvc:draftsvc",
              "//draftsvc/sources/assistant:libdraftsvc_assistant.so",
              "//verifysvc:verifysvc")
TEST_ONLY = ("attr(testonly, 1, //...) + //draftsvc/testing/... + "
             "//engine/testing/...")
TEST_NAME = re.compile(r"[/:_](testing|fault|fake|mock)", re.I)


def cquery_labels(query):
    out = subprocess.run(["bazel", "cquery", query, "--output=label"],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        return None, f"bazel cquery {query!r} failed: {out.stderr[-500:]}"
    return [line.split()[0] for line in out.stdout.splitlines()
            if line.startswith("//") or line.startswith("@")], None


def production_violations():
    problems = []
    for binary in PRODUCTION:
        labels, error = cquery_labels(f"deps({binary})")
        if error:
            problems.append(error)
            continue
        ours = [l for l in labels if l.startswith("//")]
        named = [l for l in ours if TEST_NAME.search(l)]
        if named:
            problems.append(f"{binary} links test code: {', '.join(named)}")
        test_only, error = cquery_labels(
            f"deps({binary}) intersect ({TEST_ONLY})")
        if error:
            problems.append(error)
        elif test_only:
            problems.append(f"{binary} links test-only targets: "
                            + ", ".join(test_only[:5]))
    # The draftsvc binary is main.cc over service:server_main; its plugin
    # is only a data dependency (loaded at run time), so the linked code is
    # here.
    linked, error = cquery_labels("deps(//draftsvc/service:server_main)")
    if error:
        problems.append(error)
    elif "//third_party:torch" in linked:
        problems.append("//draftsvc:draftsvc links //third_party:torch "
                        "(only its assistant plugin may)")
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bazel", action="store_true",
                        help="also check Bazel's dependency graph")
    args = parser.parse_args(argv)
    used_exceptions = set()
    problems = (include_violations() + length_violations(used_exceptions) +
                scheduler_violations() + rpc_violations())
    if args.bazel:
        problems += bazel_violations()
    for p in problems:
        print("layering:", p, file=sys.stderr)
    if problems:
        return 1
    for key in sorted(set(LENGTH_EXCEPTIONS) - used_exceptions):
        print(f"layering: note: LENGTH_EXCEPTIONS[{key!r}] is no longer "
              "needed; remove it")
    for key in sorted(used_exceptions):
        print(f"layering: allowed: {key}: {LENGTH_EXCEPTIONS[key]}")
    print("layering: no generated proto headers below the edges, arrows point "
          "down (draftsvc: storage < sources < mix < index < service), "
          "serving and draftsvc functions <= 80 lines, draftsvc files <= 700 "
          "lines (exceptions listed), main.cc < 150 lines, the "
          "scheduler names no draft source, draftsvc's RPC handlers drive "
          "no source by name"
          + ("; no test code in the production binaries, no LibTorch in "
             "draftsvc" if args.bazel else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
