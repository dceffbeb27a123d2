"""The built-in terminal task suite, registered as domain `terminal`."""

from __future__ import annotations

from domains import get_registry


def test_the_builtin_suite_is_a_domain_whose_every_task_is_sound():
    domain = get_registry().get("terminal")
    assert "terminal" in domain.tags and domain.episode_task is not None
    evals, train = domain.eval_items(), domain.generate("train", 1000, 0)
    assert len(evals) + len(train) >= 20 and evals and train
    assert not {r["id"] for r in evals} & {r["id"] for r in train}
    checks = domain.extra_checks()
    assert checks["tasks_check"]["passed"], checks["tasks_check"]["detail"]
    task = domain.episode_task(evals[0])
    assert domain.score(task.solution_text, evals[0]) == 1.0 and domain.score("", evals[0]) == 0.0


def test_the_demo_leaves_multi_turn_episodes_out_of_core():
    from pipelines.demo import select_domains

    assert "terminal" not in select_domains("core") and "terminal" in select_domains("builtin")


# -- tests strengthened after mutation testing (quality.report_card.mutants, issue 41 item 4) ---------

# Mutants of the oracles that the hidden tests paid before: each must fail now.
FORMER_SURVIVORS = {
    "log_count_errors": "cut -d' ' -f3 app.log | grep -c ERROR > errors.txt",  # a level containing ERROR counted
    "log_errors_per_hour": "grep -E '^[^ ]+ level=error ' service.log | cut -c12-13 | uniq -c "
                           "| sed -E 's/^ *([0-9]+) (.*)$/\\2 \\1/' > errors_by_hour.txt",  # hours not merged across days
    "write_rpn_calculator": None,  # the oracle with its unknown-token error deleted (built below)
}

# Correct solutions written another way than the oracles: the stronger tests must still pass them.
CORRECT_ALTERNATIVES = {
    "log_count_errors": [
        "cut -d' ' -f3 app.log | grep -x ERROR | wc -l > errors.txt",
        "n=0; while read -r day time level rest; do [ \"$level\" = ERROR ] && n=$((n + 1)); done < app.log; "
        "echo \"$n\" > errors.txt",
        "python3 -c \"print(sum(l.split(' ')[2] == 'ERROR' for l in open('app.log')))\" > errors.txt",
    ],
    "log_errors_per_hour": [
        "while read -r stamp level rest; do [ \"$level\" = level=error ] && echo \"${stamp:11:2}\"; done < service.log "
        "| sort | uniq -c | while read -r n h; do echo \"$h $n\"; done > errors_by_hour.txt",
        "python3 - <<'EOF'\nfrom collections import Counter\nfrom datetime import datetime\n"
        "hours = Counter(datetime.strptime(l.split()[0], '%Y-%m-%dT%H:%M:%SZ').hour for l in open('service.log')\n"
        "                if l.split()[1] == 'level=error')\n"
        "open('errors_by_hour.txt', 'w').write(''.join(f'{h:02d} {n}\\n' for h, n in sorted(hours.items())))\nEOF",
    ],
    "write_rpn_calculator": [
        "cat > rpn.py <<'EOF'\nimport sys\nops = {'+': lambda a, b: a + b, '-': lambda a, b: a - b, '*': lambda a, b: a * b}\n"
        "def main(text):\n    stack = []\n    for token in text.split(' ') if text else []:\n        if token in ops:\n"
        "            if len(stack) < 2:\n                return None\n            b = stack.pop()\n"
        "            stack.append(ops[token](stack.pop(), b))\n"
        "        elif token.lstrip('-').isdigit() and token.count('-') <= 1 and token.isascii():\n"
        "            stack.append(int(token))\n        else:\n            return None\n"
        "    return stack[0] if len(stack) == 1 else None\n"
        "result = main(sys.argv[1] if len(sys.argv) > 1 else '')\nif result is None:\n    print('error')\n"
        "    sys.exit(1)\nprint(result)\nEOF",
        "cat > rpn.py <<'EOF'\nimport re, sys\n"
        "def fold(tokens):\n    if not tokens:\n        raise ValueError\n    top = tokens.pop()\n"
        "    if re.fullmatch(r'-?[0-9]+', top):\n        return int(top)\n    if top not in ('+', '-', '*'):\n"
        "        raise ValueError\n    right = fold(tokens)\n    left = fold(tokens)\n"
        "    return left + right if top == '+' else left - right if top == '-' else left * right\n"
        "try:\n    tokens = sys.argv[1].split(' ') if sys.argv[1:] and sys.argv[1] else []\n    value = fold(tokens)\n"
        "    if tokens:\n        raise ValueError\nexcept (ValueError, IndexError):\n    print('error')\n    sys.exit(1)\n"
        "print(value)\nEOF",
    ],
}


def _task_sample(domain, task):
    rows = domain.generate("eval", 1000) + domain.generate("train", 1000)
    return next(r for r in rows if r["metadata"]["task"] == task)


def test_mutants_the_strengthened_tests_paid_before_now_fail():
    domain = get_registry().get("terminal")
    samples = {task: _task_sample(domain, task) for task in FORMER_SURVIVORS}
    rpn = samples["write_rpn_calculator"]["answer"]
    assert 'raise ValueError(f"unknown token {token}")' in rpn
    scripts = dict(FORMER_SURVIVORS, write_rpn_calculator=rpn.replace('raise ValueError(f"unknown token {token}")',
                                                                        "pass"))
    scores = domain.safe_score_many(list(scripts.values()), [samples[t] for t in scripts])
    assert scores == [0.0] * len(scripts), dict(zip(scripts, scores))


def test_correct_alternatives_of_the_strengthened_tasks_still_pass():
    domain = get_registry().get("terminal")
    pairs = [(script, _task_sample(domain, task)) for task, scripts in CORRECT_ALTERNATIVES.items() for script in scripts]
    scores = domain.safe_score_many([s for s, _ in pairs], [row for _, row in pairs])
    refused = [(row["metadata"]["task"], script[:80]) for (script, row), score in zip(pairs, scores) if score != 1.0]
    assert not refused, refused
