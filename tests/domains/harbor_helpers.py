"""Harbor task folders written by tests: small, on the debian:bookworm-slim base the built-in suite
shares (so the image store has it), each task's own layers a few KB."""

from __future__ import annotations

from pathlib import Path

TASK_TOML = """\
schema_version = "1.4"

[task]
name = "assay-tests/{name}"
keywords = ["test"]

[metadata]
difficulty = "easy"

[agent]
timeout_sec = 60.0

[verifier]
timeout_sec = 30.0

[environment]
cpus = 1
memory_mb = 256
storage_mb = 64
"""
DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY seed.txt ./\n"
TEST_SH = """\
#!/bin/bash
if [ "$(cat /app/out.txt 2>/dev/null)" = "$(tr a-z A-Z < /tests/expected_source.txt)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
SOLVE_SH = "#!/bin/bash\ntr a-z A-Z < /app/seed.txt > /app/out.txt\n"


def write_harbor_task(suite: Path, name: str, *, toml: str | None = None, dockerfile: str = DOCKERFILE,
                      test_sh: str = TEST_SH, solve_sh: str = SOLVE_SH, seed: str = "hello harbor\n",
                      instruction: str = "Write the contents of /app/seed.txt in upper case to /app/out.txt.\n",
                      extra: dict[str, str] | None = None) -> Path:
    """A Harbor task folder: upper-case /app/seed.txt into /app/out.txt (reward.txt 1 or 0)."""
    folder = suite / name
    for sub in ("environment", "tests", "solution"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "task.toml").write_text(toml if toml is not None else TASK_TOML.format(name=name))
    (folder / "instruction.md").write_text(instruction)
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "environment" / "seed.txt").write_text(seed)
    (folder / "tests" / "test.sh").write_text(test_sh)
    (folder / "tests" / "expected_source.txt").write_text(seed)
    (folder / "solution" / "solve.sh").write_text(solve_sh)
    for rel, text in (extra or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def write_harbor_suite(root: Path, name: str = "harbor_tasks") -> Path:
    """Three tasks: two that upper-case a seed, one whose verifier writes named metrics."""
    suite = root / name
    write_harbor_task(suite, "upper-a", seed="alpha beta\n")
    write_harbor_task(suite, "upper-b", seed="gamma delta\n")
    write_harbor_task(suite, "metrics", test_sh=(
        "#!/bin/bash\n"
        "ok=0; [ \"$(cat /app/out.txt 2>/dev/null)\" = \"$(tr a-z A-Z < /tests/expected_source.txt)\" ] && ok=1\n"
        "printf '{\"reward\": %s, \"exact\": %s, \"length\": %s}' $ok $ok $(wc -c < /app/seed.txt)"
        " > /logs/verifier/reward.json\n"))
    return suite
