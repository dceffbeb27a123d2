"""Inspect AI tasks imported as Assay domains (domains/importers/inspect_task.py, issue 44).

Parity: the same completions (right, wrong, reformatted, hedged, empty) are scored by a real
``inspect_ai.eval`` run, whose mock model (``mockllm/model``) answers each prompt with them, and by the
imported domain's ``safe_score_many``; every per-sample score Inspect logs must equal Assay's, for
every supported scorer. The mock model also checks the prompts: it finds a prompt's completions by
the prompt Assay rendered, so a prompt Inspect would send differently finds none.

Refusals name the feature and write nothing; an import persists (a new process lists and scores it;
an edited copy of its source is refused); the README's example passes ``assay domains check``."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from domains.importers.environments import ImportRefused, environment_domain, import_environment  # noqa: E402
from tests.conftest import REPO, user_shell  # noqa: E402

TASKS = Path(__file__).parent / "inspect_tasks"
PARITY = TASKS / "parity_tasks.py"
REFUSED = TASKS / "refused_tasks.py"
# one task per supported scorer: match (numeric; and with few-shot examples read from a second file), includes,
# exact, f1, pattern, answer, choice (single, several)
PARITY_TASKS = ("sums", "sums_shown", "colours", "opposites", "titles", "final_word", "yes_no", "planets",
                "planets_multi")


def variants(targets: list[str], other: str) -> list[str]:
    """Completions for one item: right, reformatted, partly right, hedged, wrong, empty."""
    t = targets[-1]
    return [t, f"The answer is {t}.", t.upper(), f"  {t}\n", f"{t}.0", f"${t}", f"ANSWER: {t}", f"ANSWER: {t.lower()}",
            f"Final answer: {t}", f"Reasoning first.\nANSWER: {t}", f"ANSWER: ({t})", f"**ANSWER: {t}**",
            f"{other} or {t}", f"{t} or {other}", f"ANSWER: {', '.join(targets)}", f"ANSWER: {other}", other,
            f"Final answer: {other}", t.split()[0], f"{t} {t}", "I don't know", ""]


def imported(tmp_path: Path) -> dict[str, object]:
    home = tmp_path / "home"
    domains = {}
    for name in PARITY_TASKS:
        result = import_environment("inspect", f"{PARITY}@{name}", home=home)
        assert result.name == name
        domains[name] = environment_domain(result.folder)
    return domains


def items_of(domain) -> list[dict]:
    return list(domain.samples("train", 10_000, 0)) + list(domain.samples("eval", 10_000, 0))


def test_every_supported_scorer_scores_as_inspect_eval_logs_it(tmp_path):
    import inspect_ai
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import value_to_float

    from domains.importers.inspect_task import render_messages

    domains = imported(tmp_path)
    by_prompt: dict[str, list[str]] = {}
    by_inspect_id: dict[tuple[str, str], dict] = {}
    for name, domain in domains.items():
        items = items_of(domain)
        for i, item in enumerate(items):
            targets = item["metadata"]["target"]
            other = items[(i + 1) % len(items)]["metadata"]["target"][0]
            assert item["prompt"] not in by_prompt
            by_prompt[item["prompt"]] = variants(targets, other)
            by_inspect_id[(name, str(item["metadata"]["inspect_id"]))] = item
    epochs = len(next(iter(by_prompt.values())))
    served: collections.Counter = collections.Counter()
    unknown: list[str] = []

    def mock_model(messages, tools, tool_choice, config):
        prompt = render_messages(messages)
        if prompt in by_prompt:
            text = by_prompt[prompt][served[prompt] % epochs]
            served[prompt] += 1
        else:
            unknown.append(prompt)
            text = "no such prompt"
        output = ModelOutput.from_content("mockllm/model", text)
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # no tokenizer download
        return output

    logs = inspect_ai.eval([f"{PARITY}@{name}" for name in PARITY_TASKS], model="mockllm/model",
                           model_args={"custom_outputs": mock_model}, epochs=epochs, log_dir=str(tmp_path / "logs"),
                           display="none")
    assert not unknown, f"Inspect sent prompts that Assay rendered differently: {unknown[:2]}"
    assert all(count == epochs for count in served.values()) and len(served) == len(by_prompt)

    to_float = value_to_float()
    compared, values = collections.Counter(), collections.defaultdict(set)
    mismatches = []
    for log in logs:
        assert log.status == "success", (log.eval.task, log.error)
        name = log.eval.task.split("/")[-1]
        [scorer] = {key for sample in log.samples for key in sample.scores}
        rows = [(s.output.completion, by_inspect_id[(name, str(s.id))], to_float(s.scores[scorer].value))
                for s in log.samples]
        ours = domains[name].safe_score_many([c for c, _, _ in rows], [item for _, item, _ in rows])
        for (completion, item, theirs), mine in zip(rows, ours):
            compared[scorer] += 1
            values[scorer].add(theirs)
            if mine != theirs:
                mismatches.append((name, item["id"], completion, theirs, mine))
    assert not mismatches, mismatches[:10]
    assert set(compared) == {"match", "includes", "exact", "f1", "pattern", "answer", "choice"}, compared
    # the completions reach both outcomes for every scorer, and f1 its partial credit
    assert all({0.0, 1.0} <= v for v in values.values()), values
    assert any(0 < v < 1 for v in values["f1"]), values["f1"]
    assert sum(compared.values()) == epochs * len(by_prompt)
    print(dict(compared), "per-sample scores identical")


def test_prompts_are_inspect_renders_and_references_earn_full_credit(tmp_path):
    domains = imported(tmp_path)
    [sums] = [s for s in items_of(domains["sums"]) if s["id"] == "sum-1"]
    assert sums["prompt"] == "Reply with the number only.\n\nCompute: 7 + 5"  # system message, then the template
    assert sums["answer"] == "12" and sums["metadata"]["target"] == ["12"]
    [planet] = [s for s in items_of(domains["planets"]) if s["id"] == "mc1"]
    assert planet["prompt"].endswith("Which planet is closest to the Sun?\n\nA) Venus\nB) Mercury\nC) Mars")
    assert planet["answer"] == "ANSWER: B" and planet["metadata"]["choices"] == ["Venus", "Mercury", "Mars"]
    [shown] = [s for s in items_of(domains["sums_shown"]) if s["id"] == "sum-1"]
    assert shown["prompt"] == "3 + 4 = 7\n\n10 - 6 = 4\n\n7 + 5"  # few-shot examples from a second file
    copied = sorted(p.name for p in (tmp_path / "home" / "environments" / "sums_shown" / "source").iterdir())
    assert copied == ["parity_tasks.py", "sums.jsonl", "sums_examples.jsonl"]  # every data file the task read
    several = items_of(domains["planets_multi"])
    assert {s["answer"] for s in several} == {"ANSWER: A, C", "ANSWER: B, C"}
    opposites = items_of(domains["opposites"])  # samples without ids: a content hash, Inspect's position kept
    assert all(len(s["id"]) == 16 for s in opposites)
    assert sorted(s["metadata"]["inspect_id"] for s in opposites) == [1, 2, 3, 4]
    for name, domain in domains.items():
        items = items_of(domain)
        scores = domain.safe_score_many([s["answer"] for s in items], items)
        if name == "final_word":  # pattern(r"Final answer:\s*(\w+)"): no generic form of the target matches it
            assert scores == [0.0] * len(items)
        else:
            assert scores == [1.0] * len(items), name


def test_a_module_task_and_task_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the module's data is found from its own folder, as Inspect loads a file
    result = import_environment("inspect", "tests.domains.importers.inspect_tasks.parity_tasks:colours",
                                home=tmp_path / "home")
    assert result.name == "colours" and sum(result.counts.values()) == 4
    assert sorted(p.name for p in (result.folder / "source").iterdir()) == ["colours.csv", "parity_tasks.py"]
    strict = import_environment("inspect", f"{PARITY}@sums", name="sums_text",
                                options={"arguments": {"numeric": False}}, home=tmp_path / "home")
    domain = environment_domain(strict.folder)
    [item] = [s for s in items_of(domain) if s["id"] == "sum-4"]  # 1234
    assert domain.safe_score_many(["1,234", "1234"], [item, item]) == [0.0, 1.0]  # text match: the comma counts
    with pytest.raises(ImportRefused, match="takes no argument 'digits'"):
        import_environment("inspect", f"{PARITY}@sums", options={"arguments": {"digits": 3}}, home=tmp_path / "h2")
    with pytest.raises(ImportRefused, match="several @task functions"):
        import_environment("inspect", str(PARITY), home=tmp_path / "h2")
    assert not (tmp_path / "h2").exists()


REFUSALS = [
    ("in_sandbox", "uses a sandbox (docker)"),
    ("sample_in_sandbox", "sample s1 uses a sandbox"),
    ("with_tools", "uses tools (inspect_ai/use_tools)"),
    ("model_graded", "model-graded scorer (model_graded_qa)"),
    ("custom_solver", "a custom solver (shout)"),
    ("custom_scorer", "a custom scorer (last_word)"),
    ("two_scorers", "has 2 scorers"),
    ("with_image", "multimodal input (image)"),
    ("few_shot_turns", "multi-turn input (an assistant turn)"),
    ("second_user_turn", "outside the supported set (inspect_ai/user_message)"),
    ("from_hub", "read from a hub (hf_dataset('example-org/arithmetic'))"),
    ("choice_without_multiple_choice", "scores the choices that the multiple_choice() solver marks"),
    ("f1_with_answer_fn", "arguments that are code (answer_fn)"),
    ("no_target", "sample n1 has no target"),
]


@pytest.mark.parametrize("task, said", REFUSALS, ids=[t for t, _ in REFUSALS])
def test_unsupported_features_are_refused_by_name_before_anything_is_written(task, said, tmp_path):
    home = tmp_path / "home"
    with pytest.raises(ImportRefused) as refused:
        import_environment("inspect", f"{REFUSED}@{task}", home=home)
    assert said in str(refused.value), str(refused.value)
    assert not home.exists()
    if task == "model_graded":  # points to Assay's gated judges
        assert "assay reward train" in str(refused.value) and "assay reward check" in str(refused.value)


def test_the_cli_refuses_with_exit_2_and_writes_nothing(tmp_path):
    env = user_shell(tmp_path / "home")
    out = subprocess.run(["assay", "domains", "import", "inspect", f"{REFUSED}@with_tools"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("assay: error: Inspect task 'with_tools' uses tools"), out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "home").exists()


def test_the_readme_example_persists_checks_scores_in_a_new_process_and_an_edit_is_refused(tmp_path):
    env = user_shell(tmp_path / "home")

    def assay(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["assay", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    out = assay("domains", "import", "inspect", "examples/environments/inspect/capitals.py", "--json")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["name"] == "capitals" and sum(record["counts"].values()) == 30
    assert any("system message is rendered at the start" in note for note in record["notes"])
    listed = json.loads(assay("domains", "list", "--json").stdout)
    [capitals] = [d for d in listed if d["name"] == "capitals"]
    assert "imported" in capitals["tags"] and "inspect" in capitals["tags"]
    checked = assay("domains", "check", "capitals", "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["passed"], checked.stdout[-2000:]

    # a new process scores with inspect_ai's scorer, rebuilt from the folder alone
    score = ("import json; from domains.registry import get_registry; d = get_registry().get('capitals'); "
             "s = [r for r in list(d.samples('train', 99, 0)) + list(d.samples('eval', 99, 0)) if r['id'] in "
             "('capital-01', 'capital-30')]; s.sort(key=lambda r: r['id']); "
             "print(json.dumps(d.safe_score_many(['It is Paris.', 'Lyon', 'cape town', 'Durban'], "
             "[s[0], s[0], s[1], s[1]])))")
    scored = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", score], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert json.loads(scored.stdout.strip().splitlines()[-1]) == [1.0, 0.0, 1.0, 0.0]

    copied = tmp_path / "home" / "environments" / "capitals" / "source" / "capitals.jsonl"
    copied.write_text(copied.read_text().replace("Paris", "Lyon"))
    refused = assay("domains", "check", "capitals")
    assert refused.returncode != 0
    assert "changed after it was imported" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    again = assay("domains", "import", "inspect", "examples/environments/inspect/capitals.py", "--replace")
    assert again.returncode == 0 and assay("domains", "check", "capitals").returncode == 0
    shutil.rmtree(tmp_path / "home")
