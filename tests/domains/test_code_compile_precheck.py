"""The `code` scorer's host-side compile pre-check (domains.builtin.code.compile_failure): a program
that cannot compile scores 0.0 without a sandbox run, and only where that is the sandbox's verdict.

The main test scores a sample of unparseable and parseable completions (the self-test's fuzz
strings and corruptions, the reward-attack families, and hand-picked edge cases) both ways: by the
scorer as shipped (pre-check on) and by the sandbox alone, and requires the same verdicts, and
that every program the host refused also failed to compile in the sandbox.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from types import SimpleNamespace

import pytest

from domains import get_registry
from domains.builtin import code

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (`make install`)")

# bodies continuing the prompt's function, each an edge case of the host/sandbox agreement
EDGE_CASES = [
    "    x: (y := 1) = 2\n    return 0\n",  # compiles without `from __future__ import annotations`, not with it
    "    return 0\r\nx = (1,\r\n     2)\r\n",  # CRLF line ends (the harness reads with universal newlines)
    "    return 0\rdef g(:\r",  # a lone CR ends a line too
    "    return '\\d' if 1 is 1 else 0\n",  # warnings only (DeprecationWarning, SyntaxWarning): compiles
    "    assert (False, 'x')\n",  # SyntaxWarning only
    "    return 0\nreturn 1\n",  # a compiler error, not a parser one: 'return' outside function
    "    nonlocal q\n",  # a symbol-table error
    "    return 0\nfrom __future__ import braces\n",
    "    return 0\n\x00\n",  # a null byte: a SyntaxError here (3.11.7), a ValueError in 3.11.2
    "    return " + "9" * 5000 + "\n",  # past the integer literal digit limit
    "    return " + "(" * 300 + "1" + ")" * 300 + "\n",  # too many nested parentheses
    "    return " + "-" * 20_000 + "1\n",  # deep unary nesting
    "\tif True:\n        return 1\n",  # tab/space mix
    "  return 0\n",  # an indentation error
    "def f(\n",
]


def _completions(domain) -> list[tuple[str, dict]]:
    from quality.domain_check import corruptions_of, fuzz_strings
    from quality.reward_attacks import _families_for

    rng = random.Random(0)
    evals, train = domain.generate("eval", 3, 0), domain.generate("train", 3, 1)
    both = evals + train
    pairs = [(text, evals[0]) for text in fuzz_strings(rng, evals[0]["answer"])]
    for sample in both:
        pairs += [(c, sample) for c in corruptions_of(sample["answer"], [s["answer"] for s in both], rng).values()]
        pairs.append(("", sample))
    pairs += [(c, train[0]) for cs in _families_for(domain, train[0]).values() for c in cs]
    pairs += [(text, s) for text in EDGE_CASES for s in (evals[0], train[1])]
    pairs += [(s["answer"], s) for s in both]  # references: 1.0 both ways
    return pairs


@needs_bwrap
def test_precheck_verdicts_equal_the_sandbox_verdicts():
    from sandbox import SandboxPool, default_sandbox

    sandbox = default_sandbox()
    if not code.same_grammar(sandbox):
        pytest.skip("the sandbox's Python has another grammar than this one: the pre-check is off")
    pairs = _completions(get_registry().get("code"))
    requests = [code._request(c, s) for c, s in pairs]
    refused = [code.compile_failure(r, sandbox) for r in requests]
    with SandboxPool(workers=2) as pool:
        executions = pool.run_many(requests)  # the sandbox alone, for every completion
    sandbox_verdicts = [code._judge(s, e)[0] for (_, s), e in zip(pairs, executions)]

    n_refused = sum(r is not None for r in refused)
    assert n_refused >= len(pairs) // 3 and len(pairs) - n_refused >= 30, (n_refused, len(pairs))
    for (completion, _), why, execution, verdict in zip(pairs, refused, executions, sandbox_verdicts):
        if why is not None:  # the host refused it: the harness's compile() failed on it in the sandbox too
            assert verdict == 0.0 and "exec(compile(source" in execution.stderr, (completion[:80], execution)
            if execution.limit == "output":  # the traceback quoting a 20,000-character line hit the output limit
                continue
            assert execution.status == "error", (completion[:80], execution)
            # (a null byte is a SyntaxError in 3.11.7, a ValueError in 3.11.2, which the sandbox may run)
            assert re.search(r"\n(SyntaxError|IndentationError|TabError|ValueError: source code string cannot "
                             r"contain null bytes)\b[^\n]*\n$", execution.stderr), (completion[:80], execution.stderr[-500:])
    # the scorer as shipped (pre-check on), batched and one at a time
    assert code.score_many([c for c, _ in pairs], [s for _, s in pairs], workers=2) == sandbox_verdicts
    edge = [i for i, (c, _) in enumerate(pairs) if c in EDGE_CASES]
    assert [code.score(*pairs[i]) for i in edge] == [sandbox_verdicts[i] for i in edge]
    assert sandbox_verdicts[-6:] == [1.0] * 6  # the references (last): both verdicts in the sample


class _FakeSandbox:
    """A sandbox whose probe answers ``grammar`` (or fails), for the guard's own tests."""

    def __init__(self, grammar, status="ok", unavailable=None):
        self.grammar, self.status, self.unavailable, self.probes = grammar, status, unavailable, 0

    @property
    def isolation(self):
        if self.unavailable:
            raise self.unavailable
        return "bubblewrap"

    def run_program(self, source, **kwargs):
        self.probes += 1
        return SimpleNamespace(status=self.status, stdout=json.dumps(self.grammar) + "\n")


def _unparseable_request():
    sample = code.to_sample(code.problems()[0])
    return code._request("Sure! Here is the function:\n", sample)


def test_precheck_only_where_the_sandbox_has_this_grammar():
    request = _unparseable_request()
    same = _FakeSandbox(code._host_grammar())
    assert code.compile_failure(request, same) and code.compile_failure(request, same)
    assert same.probes == 1  # probed once per sandbox
    major, minor, digits = code._host_grammar()
    for other in ([major, minor + 1, digits], [major, minor - 1, digits], [major, minor, (digits or 0) + 1]):
        assert code.compile_failure(request, _FakeSandbox(other)) is None, other
    assert code.compile_failure(request, _FakeSandbox(code._host_grammar(), status="error")) is None


def test_precheck_never_scores_without_isolation_nor_past_the_scratch_size():
    from sandbox import SandboxUnavailable

    request = _unparseable_request()
    with pytest.raises(SandboxUnavailable):
        code.compile_failure(request, _FakeSandbox(code._host_grammar(), unavailable=SandboxUnavailable("no bwrap")))
    sample = code.to_sample(code.problems()[0])
    huge = code._request("(" * (code.scoring_limits().scratch_mb << 19), sample)  # half the scratch folder
    assert code.compile_failure(huge, _FakeSandbox(code._host_grammar())) is None  # the sandbox decides (it raises)
