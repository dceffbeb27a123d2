"""The verifiers importer (issue 44, domains.importers.verifiers_env): parity with verifiers' own scoring,
refusals by name with nothing written, persistence across processes and the self-test of the example."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from domains.base import ScoringError
from domains.importers.environments import ImportRefused, environment_domain, import_environment
from tests.conftest import REPO, user_shell

vf = pytest.importorskip("verifiers.v1")

FIXTURES = Path(__file__).parent / "verifiers_fixtures"
EXAMPLES = REPO / "examples" / "environments" / "verifiers"
ARITH = EXAMPLES / "arith_env.py"
ARITH_REFERENCE = "<answer>{answer}</answer>"


def _import(home: Path, source: Path, name: str, **options):
    return import_environment("verifiers", str(source), name=name, options=options, home=home)


def _all_samples(domain) -> list[dict]:
    return [*domain.samples("train", 10_000, 0), *domain.samples("eval", 10_000, 0)]


def _verifiers_replay(tmp_path: Path, taskset: dict, rows: list[tuple[dict, str]]) -> list:
    """Score each (task data, completion) with verifiers' own offline re-scoring (vf-replay's run_replay): a
    saved run of one-turn traces, re-scored by the taskset's Task as verifiers rebuilds it."""
    from verifiers.v1.cli.replay import run_replay
    from verifiers.v1.configs.cli.replay import ReplayConfig
    from verifiers.v1.utils.loaders import task_type
    from verifiers.v1.utils.trace_store import append_trace

    task_cls = task_type(taskset["id"])
    data_cls = task_cls.data_type()
    source, out = tmp_path / "vf_run", tmp_path / "vf_replay"
    (source / "configs" / "resolved").mkdir(parents=True)
    (source / "configs" / "resolved" / "eval.json").write_text(json.dumps({"env": {"taskset": taskset}}))

    async def save() -> None:
        lock = asyncio.Lock()
        for data, completion in rows:
            task = task_cls(data_cls.model_validate(data))
            messages = ([vf.SystemMessage(content=task.data.system_prompt)] if task.data.system_prompt else []) + \
                [vf.UserMessage(content=task.data.prompt)]
            nodes = [vf.MessageNode(message=m, parent=i - 1 if i else None) for i, m in enumerate(messages)]
            nodes.append(vf.MessageNode(message=vf.AssistantMessage(content=completion), parent=len(nodes) - 1,
                                        sampled=True))
            trace = vf.Trace(task=vf.TraceTask(type=task_cls.__name__, data=task.data, key=task.key, hash=task.hash),
                             agent=vf.AgentInfo(config=vf.AgentConfig()), nodes=nodes, is_completed=True, ok=True)
            await append_trace(source, trace, lock)

    asyncio.run(save())
    config = ReplayConfig.model_validate({"taskset": taskset, "rich": False, "output_dir": str(out)})
    return asyncio.run(run_replay(config, source, out))


def _weighted(trace) -> float:
    """verifiers' weighted sum over the weights' total: the documented normalisation."""
    assert all(r is not None for r in trace.rewards.values()), trace.rewards
    return trace.reward / sum(r.weight for r in trace.rewards.values())


def _arith_completions(sample: dict) -> dict[str, str]:
    answer = sample["metadata"]["task"]["answer"]
    wrong = str(int(answer) + 1)
    return {"reference": sample["answer"], "reasoned": f"First I compute it.\n<answer>{answer}</answer>",
            "spaced": f"<answer> {answer} </answer>\n", "wrong": f"<answer>{wrong}</answer>",
            "bare": answer, "two_tags": f"<answer>{wrong}</answer> <answer>{answer}</answer>",
            "trailing": f"<answer>{answer}</answer> or {wrong}", "not_a_number": "<answer>many</answer>",
            "empty": ""}


def test_parity_arith_example_with_verifiers_replay(tmp_path, monkeypatch):
    """The example's rubric (correct x1 + formatted x0.25): every completion variant on every item scores the
    same through the imported domain as verifiers' own re-scoring gives, divided by the weights' total."""
    _import(tmp_path / "home", ARITH, "vf_arith", reference=ARITH_REFERENCE)
    domain = environment_domain(tmp_path / "home" / "environments" / "vf_arith")
    samples = _all_samples(domain)
    assert len(samples) == 40
    rows = [(s, kind, c) for s in samples for kind, c in _arith_completions(s).items()]
    ours = domain.safe_score_many([c for _, _, c in rows], [s for s, _, _ in rows])

    monkeypatch.syspath_prepend(str(EXAMPLES))
    traces = _verifiers_replay(tmp_path, {"id": "arith_env"}, [(s["metadata"]["task"], c) for s, _, c in rows])
    theirs = [_weighted(t) for t in traces]
    assert [t.task.data.id for t in traces] == [s["id"] for s, _, _ in rows]
    assert ours == theirs
    by_kind: dict[str, set] = {}
    for (_, kind, _), score in zip(rows, ours):
        by_kind.setdefault(kind, set()).add(score)
    assert by_kind["reference"] == by_kind["reasoned"] == by_kind["spaced"] == {1.0}
    assert by_kind["wrong"] == {0.25 / 1.25}  # formatted but wrong: the format reward alone, normalised
    for kind in ("bare", "two_tags", "trailing", "not_a_number", "empty"):
        assert by_kind[kind] == {0.0}, kind


def test_parity_continuous_reward_and_zero_weight(tmp_path, monkeypatch):
    """A continuous reward is kept as it is (not binarised); a weight-0 reward reporting a length (outside
    [0, 1]) counts for nothing; the data file the source reads is copied with it."""
    result = _import(tmp_path / "home", FIXTURES / "overlap_env.py", "vf_overlap",
                     reference="<reversed>{answer}</reversed>")
    assert (result.folder / "source" / "overlap_data.jsonl").is_file()
    domain = environment_domain(result.folder)
    samples = _all_samples(domain)
    rows = []
    for s in samples:
        answer = s["metadata"]["task"]["answer"]
        for completion in (s["answer"], f"<reversed>{answer[:-4]}</reversed>", f"<reversed>{answer[::-1]}</reversed>",
                           answer, "<reversed></reversed>"):
            rows.append((s, completion))
    ours = domain.safe_score_many([c for _, c in rows], [s for s, _ in rows])
    monkeypatch.syspath_prepend(str(FIXTURES))
    traces = _verifiers_replay(tmp_path, {"id": "overlap_env"}, [(s["metadata"]["task"], c) for s, c in rows])
    assert ours == [_weighted(t) for t in traces]
    assert ours == [t.rewards["overlap"].score for t in traces]
    assert any(0 < score < 1 for score in ours) and 1.0 in ours and 0.0 in ours


@pytest.mark.parametrize(("fixture", "named"), [
    ("scripted_user_env", "EchoEnv"),
    ("tools_env", "toolsets LookupToolset"),
    ("judge_env", "JudgeConfig field 'judge'"),
    ("sandbox_env", "file_written take the rollout's runtime"),
    ("measured_env", "metrics run_program take the rollout's runtime"),
    ("legacy_env", "verifiers v0 environment"),
    ("penalty_env", "negative reward weights {'too_long': -0.5}"),
])
def test_refused_by_name_nothing_written(tmp_path, fixture, named):
    home = tmp_path / "home"
    with pytest.raises(ImportRefused) as refused:
        _import(home, FIXTURES / f"{fixture}.py", fixture)
    assert named in str(refused.value)
    assert not home.exists() or not any(home.rglob("*"))


def test_multi_turn_and_judge_refusals_point_to_assay(tmp_path):
    with pytest.raises(ImportRefused) as multi:
        _import(tmp_path, FIXTURES / "scripted_user_env.py", "echo")
    assert "not supported yet" in str(multi.value) and "agent loop" in str(multi.value)
    with pytest.raises(ImportRefused) as judge:
        _import(tmp_path, FIXTURES / "judge_env.py", "poem")
    assert "assay reward" in str(judge.value) and "judges" in str(judge.value)


def test_reference_must_earn_full_credit(tmp_path):
    """Without --reference the bare answer is the reference, which the example's rewards pay nothing: refused
    with the hint, before anything is written."""
    with pytest.raises(ImportRefused) as refused:
        _import(tmp_path / "home", ARITH, "vf_arith")
    assert "--reference" in str(refused.value) and "40 of 40" in str(refused.value)
    assert not (tmp_path / "home").exists()


def test_arguments_are_the_taskset_config(tmp_path):
    result = _import(tmp_path, ARITH, "vf_arith", reference=ARITH_REFERENCE, arguments={"num_examples": 12, "seed": 3})
    assert sum(result.counts.values()) == 12
    with pytest.raises(ImportRefused) as refused:
        _import(tmp_path, ARITH, "vf_arith_bad", reference=ARITH_REFERENCE, arguments={"num_exampels": 12})
    assert "num_exampels" in str(refused.value) and "num_examples" in str(refused.value)


def test_reward_outside_unit_range_is_an_error_not_clamped(tmp_path):
    result = _import(tmp_path, FIXTURES / "overflow_env.py", "vf_loud")
    domain = environment_domain(result.folder)
    sample = _all_samples(domain)[0]
    assert domain.safe_score_many([sample["answer"], "nope"], [sample, sample]) == [1.0, 0.0]
    with pytest.raises(ScoringError, match=r"returned 2.0, outside \[0, 1\]"):
        domain.safe_score_many(["loud!!"], [sample])


def test_installed_module_version_and_files_are_checked(tmp_path, monkeypatch):
    """An installed (importable) module is recorded, not copied; edited afterwards, scoring is refused."""
    package = tmp_path / "site" / "assay_vf_probe"
    package.mkdir(parents=True)
    shutil.copy(FIXTURES / "overflow_env.py", package / "taskset.py")
    (package / "__init__.py").write_text("from assay_vf_probe.taskset import LoudTaskset\n\n"
                                         "__all__ = ['LoudTaskset']\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    result = _import(tmp_path / "home", "assay_vf_probe", "vf_probe")
    record = json.loads((result.folder / "import.json").read_text())
    assert record["settings"]["module"] == "assay_vf_probe" and record["settings"]["module_digest"]
    assert any("belongs to no installed distribution" in note for note in result.notes)
    domain = environment_domain(result.folder)
    sample = _all_samples(domain)[0]
    assert domain.safe_score_many([sample["answer"]], [sample]) == [1.0]
    (package / "taskset.py").write_text((package / "taskset.py").read_text().replace("2.0 if", "1.0 if"))
    stale = environment_domain(result.folder)
    with pytest.raises(ScoringError, match="changed since it was imported.*--replace"):
        stale.safe_score_many([sample["answer"]], [sample])


def test_hub_dataset_refused_offline(tmp_path):
    """A taskset whose load() downloads from the Hugging Face Hub is refused here, saying so (offline mode
    makes the failure immediate), and nothing is written."""
    home = tmp_path / "home"
    env = dict(user_shell(home), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    out = subprocess.run(["assay", "domains", "import", "verifiers", str(FIXTURES / "hub_env.py")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "HubTaskset.load() failed" in out.stderr and "Hugging Face Hub" in out.stderr, out.stderr[-2000:]
    assert not (home / "environments").exists() or not any((home / "environments").iterdir())


def test_persisted_domain_loads_and_passes_its_check_in_new_processes(tmp_path):
    home = tmp_path / "home"
    env = user_shell(home)

    def assay(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["assay", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)

    imported = assay("domains", "import", "verifiers", str(ARITH.relative_to(REPO)), "--name", "vf_arith",
                     "--reference", ARITH_REFERENCE, "--arg", "num_examples=40", "--json")
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert json.loads(imported.stdout)["counts"] == {"train": 18, "eval": 22}
    listed = assay("domains", "list", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "vf_arith" in {d["name"] for d in json.loads(listed.stdout)}
    checked = assay("domains", "check", "vf_arith")
    assert checked.returncode == 0 and "PASS  vf_arith" in checked.stdout, checked.stdout + checked.stderr[-2000:]
