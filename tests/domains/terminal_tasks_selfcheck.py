"""Self-check of the built-in terminal task suite (domains/builtin/terminal_tasks/).

The suite is in Harbor's task format (task.toml, instruction.md, environment/Dockerfile and
environment/files/, tests/run.sh behind tests/test.sh, solution/solve.sh). For every task folder,
each in fresh temporary folders:
- the folder follows the format (task.toml read by Assay's typed model; a difficulty in [metadata]);
- the oracle: environment/files/ copied to an episode folder, ``bash solution/solve.sh`` run there,
  then tests/ copied elsewhere (read-only) and ``bash <copy>/run.sh`` run with cwd = the episode
  folder: must pass;
- doing nothing: the same hidden tests on the untouched files: must fail;
- every "wrong but plausible" answer in WRONG below (off by one, wrong format, half a fix, the
  answer a lazy one-liner gives, a hard-coded answer): must fail. Every task has at least one.

Plain subprocesses, no sandbox (the terminal runner adds it). Run as root, every episode and test
runs as the unprivileged uid 65534 with the sandbox's environment, and the test sees the tests and
the episode folder read-only, so a test that writes beside itself or into the episode fails here.

``--sandbox`` also runs each oracle and the do-nothing episode as the domain does (the task's
image, built offline from its Dockerfile, under bubblewrap; the verifier on a fresh copy holding
only /app: ``domains.task_folder.check_task``), so an oracle that needs a tool the image lacks
shows up.

Not a pytest module on purpose (it runs ~150 episodes):
``python tests/domains/terminal_tasks_selfcheck.py [-v] [--sandbox] [TASK ...]``
(-v: print why each wrong answer failed).
Exit status 0 when every check holds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "domains" / "builtin" / "terminal_tasks"
DIFFICULTIES = {"very_easy", "easy", "medium", "hard"}
REQUIRED = ("task.toml", "instruction.md", "solution/solve.sh", "tests/run.sh", "tests/test.sh",
            "environment/Dockerfile")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
NOBODY = 65534
STEP_TIMEOUT_S = 120

# task -> {label: bash run in the episode folder}. Each must leave the hidden tests failing.
WRONG: dict[str, dict[str, str]] = {
    "create_hello_file": {
        "capitalised": "echo Hello > hello.txt",
        "extra words": "echo hello world > hello.txt",
        "empty file": "touch hello.txt",
        "blank line after": "printf 'hello\\n\\n' > hello.txt",
    },
    "make_directory": {"a file, not a folder": "touch out", "other name": "mkdir output",
                       "symlink to a folder": "mkdir real && ln -s real out"},
    "count_lines": {
        "off by one": "echo $(( $(wc -l < data.txt) - 1 )) > count.txt",
        "wc with the file name": "wc -l data.txt > count.txt",
        "word count": "wc -w < data.txt > count.txt",
        "edits the input to match a guess": "head -n 10 data.txt > d && mv d data.txt && echo 10 > count.txt",
        "plants os.py that prints PASS": "printf 'print(\"PASS\")\\nraise SystemExit(0)\\n' | tee os.py sys.py > /dev/null",
    },
    "rename_file": {"copy, original kept": "cp draft.txt final.txt",
                    "empty final": "rm draft.txt && touch final.txt",
                    "symlink": "mv draft.txt .d && ln -s .d final.txt"},
    "delete_tmp_files": {"every name containing tmp": "rm -f -- *tmp*",
                         "one file only": "rm a.tmp",
                         "everything": "rm -f -- *"},
    "first_line": {"two lines": "head -n 2 poem.txt > first.txt", "last line": "tail -n 1 poem.txt > first.txt",
                   "second line": "sed -n 2p poem.txt > first.txt"},
    "uppercase_file": {"copy": "cp shout.txt loud.txt", "first line only": "head -n 1 shout.txt | tr a-z A-Z > loud.txt",
                       "in place, no loud.txt": "tr a-z A-Z < shout.txt > s && mv s shout.txt"},
    "sort_names": {"reverse": "sort -r names.txt > sorted.txt", "unsorted copy": "cp names.txt sorted.txt",
                   "sorted in place only": "sort -o names.txt names.txt"},
    "dedupe_lines": {"sort -u": "sort -u items.txt > unique.txt", "uniq (adjacent only)": "uniq items.txt > unique.txt",
                     "keeps last occurrence": "tac items.txt | awk '!s[$0]++' | tac > unique.txt"},
    "replace_word": {"first per line only": "sed -i 's/colour/color/' report.txt",
                     "case-insensitive": "sed -i 's/[Cc]olour/color/g' report.txt",
                     "whole words only": "sed -i 's/\\bcolour\\b/color/g' report.txt",
                     "writes a new file": "sed 's/colour/color/g' report.txt > report_fixed.txt"},
    "csv_sum_column": {"price column": "awk -F, 'NR > 1 { t += $4 } END { print t }' sales.csv > total.txt",
                       "drops the last row": "head -n -1 sales.csv | awk -F, 'NR > 1 { t += $3 } END { print t }' > total.txt",
                       "row count": "echo $(( $(wc -l < sales.csv) - 1 )) > total.txt"},
    "log_count_errors": {"grep -c ERROR": "grep -c ERROR app.log > errors.txt",
                         "case-insensitive": "grep -ci error app.log > errors.txt",
                         "off by one": "echo $(( $(awk '$3 == \"ERROR\"' app.log | wc -l) + 1 )) > errors.txt",
                         # a surviving mutant of the oracle until levels like NOERROR were added
                         "level contains ERROR": "cut -d' ' -f3 app.log | grep -c ERROR > errors.txt"},
    "extract_emails": {"duplicates kept": "grep -oE '[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]+' contacts.txt | sort > emails.txt",
                       "unsorted": "grep -oE '[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]+' contacts.txt | awk '!s[$0]++' > emails.txt",
                       "trailing dots kept": "grep -oE '[a-z0-9._%+-]+@[a-z0-9.-]+' contacts.txt | sort -u > emails.txt"},
    "json_active_users": {
        "every user": "python3 -c \"import json; print('\\n'.join(u['name'] for u in json.load(open('users.json'))))\" > active.txt",
        "inactive users": "python3 -c \"import json; print('\\n'.join(u['name'] for u in json.load(open('users.json')) if not u['active']))\" > active.txt",
        "sorted names": "python3 -c \"import json; print('\\n'.join(sorted(u['name'] for u in json.load(open('users.json')) if u['active'])))\" > active.txt",
    },
    "csv_filter_rows": {"strictly older than 30": "awk -F, 'NR == 1 || $3 > 30' people.csv > older.csv",
                        "no header": "awk -F, 'NR > 1 && $3 >= 30' people.csv > older.csv",
                        "header only": "head -n 1 people.csv > older.csv"},
    "write_greeting_script": {
        "not executable": "printf '#!/usr/bin/env bash\\necho \"Hello, ${1:-World}!\"\\n' > greet.sh",
        "no default": "printf '#!/usr/bin/env bash\\necho \"Hello, $1!\"\\n' > greet.sh && chmod +x greet.sh",
        "hard-coded example": "printf '#!/usr/bin/env bash\\necho \"Hello, Ada!\"\\n' > greet.sh && chmod +x greet.sh",
        "missing comma": "printf '#!/usr/bin/env bash\\necho \"Hello ${1:-World}!\"\\n' > greet.sh && chmod +x greet.sh",
    },
    "csv_to_json": {
        "numbers as strings": "python3 -c \"import csv, json; json.dump(list(csv.DictReader(open('employees.csv'))), open('employees.json', 'w'))\"",
        "naive comma split": ("python3 -c \"import json; L = open('employees.csv').read().split(); "
                              "json.dump([dict(id=int(r[0]), name=r[1], department=r[2], salary=int(r[3])) "
                              "for r in (x.split(',') for x in L[1:]) if len(r) == 4], open('employees.json', 'w'))\""),
    },
    "log_top_ips": {"four lines": "awk '{ print $1 }' access.log | sort | uniq -c | sort -rn | head -n 4 > top3.txt",
                    "least first": "awk '{ print $1 }' access.log | sort | uniq -c | sort -rn | head -n 3 | tac > top3.txt",
                    "IP COUNT order": "awk '{ print $1 }' access.log | sort | uniq -c | sort -rn | head -n 3 | awk '{ print $2, $1 }' > top3.txt",
                    "addresses only": "awk '{ print $1 }' access.log | sort | uniq -c | sort -rn | head -n 3 | awk '{ print $2 }' > top3.txt"},
    "log_errors_per_hour": {
        "grep level=error": "grep 'level=error' service.log | cut -c12-13 | sort | uniq -c | awk '{ print $2, $1 }' > errors_by_hour.txt",
        "all levels": "cut -c12-13 service.log | sort | uniq -c | awk '{ print $2, $1 }' > errors_by_hour.txt",
        "COUNT HH order": "awk '$2 == \"level=error\" { print substr($1, 12, 2) }' service.log | sort | uniq -c > errors_by_hour.txt",
        # a surviving mutant of the oracle until the log spanned two days
        "no sort before uniq": "grep -E '^[^ ]+ level=error ' service.log | cut -c12-13 | uniq -c "
                               "| sed -E 's/^ *([0-9]+) (.*)$/\\2 \\1/' > errors_by_hour.txt",
    },
    "csv_group_totals": {
        "units, not revenue": "{ echo region,revenue; awk -F, 'NR > 1 { r[$1] += $3 } END { for (k in r) printf \"%s,%.2f\\n\", k, r[k] }' orders.csv | sort; } > region_totals.csv",
        "no header": "awk -F, 'NR > 1 { r[$1] += $3 * $4 } END { for (k in r) printf \"%s,%.2f\\n\", k, r[k] }' orders.csv | sort > region_totals.csv",
        "no decimals": "{ echo region,revenue; awk -F, 'NR > 1 { r[$1] += $3 * $4 } END { for (k in r) printf \"%s,%d\\n\", k, r[k] }' orders.csv | sort; } > region_totals.csv",
    },
    "rename_extensions": {
        "top level only": "for f in photos/*.jpeg; do mv -- \"$f\" \"${f%.jpeg}.jpg\"; done",
        "word-splitting loop": "for f in $(find photos -name '*.jpeg'); do mv \"$f\" \"${f%.jpeg}.jpg\" 2>/dev/null; done; true",
        "copies instead of renaming": "find photos -name '*.jpeg' -exec sh -c 'cp \"$1\" \"${1%.jpeg}.jpg\"' sh {} \\;",
    },
    "find_large_files": {"-size +1k (rounds up to KiB)": "find data -type f -size +1k | sort > big.txt",
                         "1000 bytes included": "find data -type f -size +999c | sort > big.txt",
                         "top level only": "find data -maxdepth 1 -type f -size +1000c | sort > big.txt",
                         "paths without data/": "cd data && find . -type f -size +1000c | sed 's|^\\./||' | sort > ../big.txt"},
    "fix_python_word_freq": {
        "lower-casing fixed, ties not": "sed -i 's/re.findall(r\"\\[a-z\\]+\", text)/re.findall(r\"[a-z]+\", text.lower())/' wordfreq.py",
        "ties fixed, lower-casing not": "sed -i 's/key=lambda pair: pair\\[1\\], reverse=True)/key=lambda pair: (-pair[1], pair[0]))/' wordfreq.py",
        "visible tests hard-coded": """cat > wordfreq.py <<'EOF'
def words(text):
    return ["the", "cat", "the", "hat"]

def top_words(text, n):
    return {"a b a c a b": [("a", 3), ("b", 2)],
            "pear fig apple fig pear apple kiwi": [("apple", 2), ("fig", 2), ("pear", 2)],
            "one two": [("one", 1), ("two", 1)]}[text]
EOF""",
        "forges a pass at import": """cat > wordfreq.py <<'EOF'
import os
print("PASS")
os._exit(0)
EOF""",
        "edits the visible tests instead": "printf 'print(\"OK\")\\n' > test_wordfreq.py",
        "plants json.py to forge the results": ("printf 'import sys\\nprint(\"PASS\")\\nsys.stdout.write(\"@@CASE-RESULTS@@[]\")\\n"
                                                "sys.exit(0)\\n' | tee json.py copy.py os.py > /dev/null"),
    },
    "fix_python_roman": {
        "to_roman fixed, from_roman not": ("python3 - <<'EOF'\n"
                                           "s = open('roman.py').read()\n"
                                           "s = s.replace('VALUES = [(1000, \"M\"), (500, \"D\"), (100, \"C\"), (50, \"L\"), (10, \"X\"), (5, \"V\"), (1, \"I\")]',\n"
                                           "  'VALUES = [(1000, \"M\"), (900, \"CM\"), (500, \"D\"), (400, \"CD\"), (100, \"C\"), (90, \"XC\"), (50, \"L\"), (40, \"XL\"), (10, \"X\"), (9, \"IX\"), (5, \"V\"), (4, \"IV\"), (1, \"I\")]')\n"
                                           "s = s.replace('number < 0 or number > 4000', 'number < 1 or number > 3999')\n"
                                           "open('roman.py', 'w').write(s)\n"
                                           "EOF"),
        "range check off by one": None,  # filled below: the oracle with 4000 allowed
        "visible tests hard-coded": """cat > roman.py <<'EOF'
def to_roman(number):
    if number == 0:
        raise ValueError(number)
    return {3: "III", 1994: "MCMXCIV"}[number]

def from_roman(numeral):
    return 42
EOF""",
    },
    "fix_python_interval_merge": {
        "touching not merged": "sed -i 's/for start, end in intervals:/for start, end in sorted(intervals):/; s/result\\[-1\\]\\[1\\] = end/result[-1][1] = max(result[-1][1], end)/' intervals.py",
        "nested shrinks": "sed -i 's/for start, end in intervals:/for start, end in sorted(intervals):/; s/start < result/start <= result/' intervals.py",
        "sorts the input in place": "sed -i 's/    result = \\[\\]/    intervals.sort()\\n    result = []/; s/start < result/start <= result/; s/result\\[-1\\]\\[1\\] = end/result[-1][1] = max(result[-1][1], end)/' intervals.py",
        "visible tests hard-coded": """cat > intervals.py <<'EOF'
def merge(intervals):
    return {"[[1, 3], [2, 6], [8, 10]]": [[1, 6], [8, 10]], "[[5, 7], [1, 2]]": [[1, 2], [5, 7]]}.get(str(intervals), [])
EOF""",
        "aliases the input pairs": """cat > intervals.py <<'EOF'
def merge(intervals):
    result = []
    for pair in sorted(intervals):
        if result and pair[0] <= result[-1][1]:
            result[-1][1] = max(result[-1][1], pair[1])
        else:
            result.append(pair)
    return result
EOF""",
    },
    "json_merge_inventory": {
        "new SKUs dropped": None,  # filled below from the oracle
        "threshold <= 10": None,
        "only the inventory file": "cp inventory.json inventory_updated.json && : > low_stock.txt",
    },
    "log_session_durations": {
        "time of day only (breaks at midnight)": (
            "awk '{ split(substr($1, 12), t, \":\"); s = t[1] * 3600 + t[2] * 60 + t[3]; "
            "if ($3 == \"login\") o[$2] = s; else if ($3 == \"logout\") d[$2] += s - o[$2] } "
            "END { for (u in d) print u, d[u] }' events.log | sort > durations.txt"),
        "first session only": None,
        "session counts": "awk '$3 == \"login\" { n[$2]++ } END { for (u in n) print u, n[u] }' events.log | sort > durations.txt",
    },
    "write_rpn_calculator": {
        "no negative numbers": None,
        "leftover values not an error": None,
        "error with status 0": None,
        "unknown tokens skipped": None,  # a surviving mutant of the oracle until "3 4 + x" was tested
        "python eval of infix": "printf 'import sys\\nprint(eval(sys.argv[1]))\\n' > rpn.py",
        "the instruction's examples hard-coded": ("printf 'import sys\\nknown = {\"3 4 + 2 *\": 14, \"5 1 2 + 4 * + 3 -\": 14, \"7 2 -\": 5}\\n"
                                                   "print(known.get(sys.argv[1], \"error\"))\\n' > rpn.py"),
    },
}


def _oracle_variant(task: str, old: str, new: str) -> str:
    """The task's oracle with one string replaced: a near-miss answer."""
    text = (SUITE / task / "solution" / "solve.sh").read_text()
    if old not in text:
        raise SystemExit(f"selfcheck: {old!r} not in {task}/solution/solve.sh; update WRONG")
    return text.replace(old, new)


WRONG["fix_python_roman"]["range check off by one"] = _oracle_variant("fix_python_roman", "number > 3999", "number > 4000")
WRONG["json_merge_inventory"]["new SKUs dropped"] = _oracle_variant(
    "json_merge_inventory", 'item = inventory.setdefault(s["sku"], {"name": s.get("name"), "qty": 0})',
    'item = inventory.get(s["sku"], {"qty": 0})')
WRONG["json_merge_inventory"]["threshold <= 10"] = _oracle_variant("json_merge_inventory", 'v["qty"] < 10', 'v["qty"] <= 10')
WRONG["log_session_durations"]["first session only"] = _oracle_variant(
    "log_session_durations", "total[user] = total.get(user, 0) + int(",
    "total[user] = total[user] if user in total else int(")
WRONG["write_rpn_calculator"]["no negative numbers"] = _oracle_variant("write_rpn_calculator", 'r"-?[0-9]+"', 'r"[0-9]+"')
WRONG["write_rpn_calculator"]["leftover values not an error"] = _oracle_variant(
    "write_rpn_calculator", "if len(stack) != 1:", "if not stack:")
WRONG["write_rpn_calculator"]["error with status 0"] = _oracle_variant("write_rpn_calculator", "sys.exit(1)", "sys.exit(0)")
WRONG["write_rpn_calculator"]["unknown tokens skipped"] = _oracle_variant(
    "write_rpn_calculator", 'raise ValueError(f"unknown token {token}")', "pass")


def _repo_on_path() -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # runnable as a plain script, without PYTHONPATH


def check_format(folder: Path) -> list[str]:
    """Problems with the folder's layout and task.toml, per Harbor's task format."""
    _repo_on_path()
    from domains.importers.harbor_config import HarborConfigError, parse_task_toml

    problems = [f"missing {required}" for required in REQUIRED if not (folder / required).is_file()]
    if not (folder / "environment" / "files").is_dir():
        problems.append("missing environment/files/ (keep a .keep file when the task starts empty)")
    try:
        config = parse_task_toml(folder / "task.toml")
    except HarborConfigError as exc:
        return problems + [str(exc)]
    if config.unknown_keys:
        problems.append(f"unknown keys {config.unknown_keys}")
    if not (folder / "instruction.md").is_file() or not (folder / "instruction.md").read_text().strip():
        problems.append("instruction.md missing or empty")
    if config.metadata.get("difficulty") not in DIFFICULTIES:
        problems.append(f"difficulty {config.metadata.get('difficulty')!r} not in {sorted(DIFFICULTIES)}")
    return problems


def difficulty_of(folder: Path) -> str:
    import tomllib

    return str(tomllib.loads((folder / "task.toml").read_text()).get("metadata", {}).get("difficulty", "?"))


def _as_nobody() -> list[str]:
    if os.geteuid() == 0 and shutil.which("setpriv"):
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    return []


def run_episode(folder: Path, agent_script: str | None) -> tuple[int | None, int, str]:
    """(agent exit status or None, hidden test exit status, test output) for one fresh episode."""
    with tempfile.TemporaryDirectory(prefix="tt-episode-") as episode_root, \
            tempfile.TemporaryDirectory(prefix="tt-hidden-") as hidden_root:
        root = Path(episode_root)
        work = root / "work"
        shutil.copytree(folder / "environment" / "files", work, symlinks=True)
        (work / ".keep").unlink(missing_ok=True)
        prefix = _as_nobody()
        agent_status = None
        os.chmod(root, 0o755)
        if agent_script is not None:
            (root / "agent.sh").write_text(agent_script)
        if prefix:
            for path in [work, *work.rglob("*")]:
                os.lchown(path, NOBODY, NOBODY)
        env = dict(ENV, HOME=str(work), TMPDIR=str(work))
        if agent_script is not None:
            agent = subprocess.run([*prefix, "bash", str(root / "agent.sh")], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
            agent_status = agent.returncode
        if prefix:  # the episode folder is now read-only to the test: a test must not write into it
            for path in [work, *work.rglob("*")]:
                os.lchown(path, 0, 0)
        # the tests go to a path the agent never saw, read-only, owned by another uid
        hidden = Path(hidden_root) / "t"
        shutil.copytree(folder / "tests", hidden)
        for path in [hidden, *hidden.rglob("*")]:
            os.chmod(path, 0o555 if path.is_dir() or os.access(path, os.X_OK) else 0o444)
        os.chmod(hidden_root, 0o755)
        test_env = dict(ENV, HOME="/nonexistent")
        test = subprocess.run([*prefix, "bash", str(hidden / "run.sh")], cwd=work, env=test_env,
                              capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        return agent_status, test.returncode, (test.stdout + test.stderr).strip()


def run_in_project_sandbox(folder: Path) -> dict:
    """The domain's own check of the task (its image, bubblewrap, the separate verifier):
    ``{"oracle_passed", "do_nothing_failed", "detail"}``."""
    _repo_on_path()
    from domains.task_folder import check_task as domain_check, load_task

    return domain_check(load_task(folder))


def check_task(folder: Path, in_sandbox: bool = False) -> list[tuple[str, bool, str]]:
    """[(check, ok, detail)] for one task."""
    results = [("format", not (problems := check_format(folder)), "; ".join(problems))]
    if problems:
        return results
    oracle_status, verdict, output = run_episode(folder, (folder / "solution" / "solve.sh").read_text())
    results.append(("oracle passes", oracle_status == 0 and verdict == 0,
                    f"solution exit {oracle_status}, test exit {verdict}: {output[-300:]}"))
    _, verdict, output = run_episode(folder, None)
    results.append(("do-nothing fails", verdict != 0, output[-200:]))
    wrongs = WRONG.get(folder.name, {})
    results.append(("has wrong answers", bool(wrongs), f"{len(wrongs)} defined"))
    for label, script in wrongs.items():
        _, verdict, output = run_episode(folder, script)
        results.append((f"wrong fails: {label}", verdict != 0, output[-200:]))
    if in_sandbox:
        checked = run_in_project_sandbox(folder)
        results.append(("sandbox: oracle passes", checked["oracle_passed"], checked["detail"][-300:]))
        results.append(("sandbox: do-nothing fails", checked["do_nothing_failed"], checked["detail"][-200:]))
    return results


def main(argv: list[str]) -> int:
    verbose, in_sandbox = "-v" in argv, "--sandbox" in argv
    argv = [a for a in argv if a not in ("-v", "--sandbox")]
    folders = sorted(p for p in SUITE.iterdir() if (p / "task.toml").is_file())
    if argv:
        unknown = set(argv) - {p.name for p in folders}
        if unknown:
            print(f"unknown task(s) {sorted(unknown)} (known: {', '.join(p.name for p in folders)})")
            return 2
        folders = [p for p in folders if p.name in argv]
    stale = set(WRONG) - {p.name for p in SUITE.iterdir()}
    if stale:
        print(f"WRONG names tasks that do not exist: {sorted(stale)}")
        return 2
    print(f"{'task':28} {'difficulty':10} {'oracle':7} {'nothing':8} {'wrong':7} {'sandbox':8} result")
    failures = 0
    for folder in folders:
        results = check_task(folder, in_sandbox)
        bad = [(name, detail) for name, ok, detail in results if not ok]
        failures += bool(bad)
        by_name = {name: ok for name, ok, _ in results}
        wrong = [ok for name, ok, _ in results if name.startswith("wrong fails")]
        boxed = [ok for name, ok, _ in results if name.startswith("sandbox:")]
        sandbox = ("ok" if all(boxed) else "BROKEN") if boxed else "-"
        difficulty = difficulty_of(folder)
        print(f"{folder.name:28} {str(difficulty):10} {'pass' if by_name.get('oracle passes') else 'FAIL':7} "
              f"{'fails' if by_name.get('do-nothing fails') else 'PASSES':8} {sum(wrong)}/{len(wrong):<5} "
              f"{sandbox:8} {'ok' if not bad else 'BROKEN'}")
        for name, ok, detail in results:
            if not ok or (verbose and detail):
                print(f"    {'' if ok else 'BROKEN '}{name}: {detail.splitlines()[-1] if detail else ''}"[:220])
    print(f"{len(folders)} tasks, {failures} broken")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
