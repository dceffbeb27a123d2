"""A domain's own checks (Domain.extra_checks) in the self-test and the selftest gate: a terminal
task suite with a broken task fails both, as a broken verifier does."""

from __future__ import annotations

from domains import Domain
from quality.batch_gates import selftest_outcomes
from quality.domain_check import CHECK_NAMES, check_domain
from tests.conftest import write_task_suite
from tests.sandbox.sandbox_helpers import needs_bwrap


def _samples(split, n, seed):
    base = 0 if split == "train" else 1000
    return [{"id": f"{split}-{i}", "prompt": f"What is {base + i} plus 1?", "answer": str(base + i + 1)} for i in range(n)]


def _score(completion, sample):
    return 1.0 if completion.strip() == sample["answer"] else 0.0


def _domain(extra):
    return Domain(name="plain", owner="t@example.com", description="d", samples=_samples, score=_score,
                  extra_checks=extra)


def test_extra_checks_join_the_report_and_decide_it():
    passing = check_domain(_domain(lambda: {"mine": {"passed": True, "detail": "fine"}}), n=4)
    assert passing["passed"] and passing["checks"]["mine"] == {"passed": True, "detail": "fine"}
    assert list(passing["checks"]) == [*CHECK_NAMES, "mine"]
    failing = check_domain(_domain(lambda: {"mine": {"passed": False, "detail": "task x is broken"}}), n=4)
    assert not failing["passed"] and all(failing["checks"][n]["passed"] for n in CHECK_NAMES)


def test_extra_checks_that_raise_or_break_the_shape_fail():
    def boom():
        raise RuntimeError("no sandbox")

    raised = check_domain(_domain(boom), n=2)
    assert not raised["passed"] and "RuntimeError: no sandbox" in raised["checks"]["extra_checks"]["detail"]
    for bad in ({"mine": {"passed": "yes"}}, {"fuzz_never_raises": {"passed": True}}, {"mine": True}):
        report = check_domain(_domain(lambda bad=bad: bad), n=2)
        assert not report["passed"] and not report["checks"]["extra_checks"]["passed"], bad


@needs_bwrap
def test_selftest_gate_fails_critically_on_a_broken_task(tmp_path):
    from domains.task_folder import task_suite_domain

    suite = write_task_suite(tmp_path)
    sound = {o.expectation: o for o in selftest_outcomes(task_suite_domain(suite), 1)}
    assert sound["tasks_check"].success and sound["tasks_check"].severity == "critical"
    (suite / "hello" / "tests" / "run.sh").write_text("exit 0\n")  # passes whatever the agent does
    broken = {o.expectation: o for o in selftest_outcomes(task_suite_domain(suite), 1)}
    assert not broken["tasks_check"].success and broken["tasks_check"].severity == "critical"
    assert "hello: doing nothing passes the tests" in broken["tasks_check"].observed
