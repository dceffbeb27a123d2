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
