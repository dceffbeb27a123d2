"""A Dockerfile read as a build plan (sandbox.dockerfile): the supported subset, resolved, and every
refusal naming the instruction and why, before anything runs. Pure: nothing is built here."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.dockerfile import DockerfileRefused, plan_dockerfile, shell_words


def _plan(tmp_path: Path, text: str, files: dict[str, str] | None = None):
    context = tmp_path / "environment"
    context.mkdir(exist_ok=True)
    for rel, body in (files or {}).items():
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        (context / rel).write_text(body)
    (context / "Dockerfile").write_text(text)
    return plan_dockerfile(context / "Dockerfile")


def test_a_typical_harbor_dockerfile_is_planned_step_by_step(tmp_path):
    plan = _plan(tmp_path, """\
# syntax=docker/dockerfile:1
ARG BASE=debian:bookworm-slim
FROM ${BASE} AS main
ENV DEBIAN_FRONTEND=noninteractive GREETING="hello world" \\
    TOOLS=/opt/tools
LABEL org.example.task="demo"
RUN apt-get update && apt-get install -y --no-install-recommends jq \\
    # a comment inside a continuation is dropped
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY data/ ./data/
COPY --chmod=755 --chown=1000:1000 run.sh $TOOLS/
RUN <<EOF
echo "$GREETING" > /app/greeting.txt
EOF
CMD ["bash"]
""", {"data/a.json": "{}", "data/b.json": "[]", "run.sh": "echo hi\n"})
    assert (plan.base.suite, plan.base.slim, plan.base.python) == ("bookworm", True, None)
    assert [s.kind for s in plan.steps] == ["run", "workdir", "copy", "copy", "run"]
    run, _, data, tool, heredoc = plan.steps
    assert run.command == ("/bin/sh", "-c", "apt-get update && apt-get install -y --no-install-recommends jq "
                                            "&& rm -rf /var/lib/apt/lists/*")
    assert run.state.env["DEBIAN_FRONTEND"] == "noninteractive" and run.line == 7
    assert (data.sources, data.dest, data.dest_is_dir) == (("data",), "/app/data", True)
    assert (tool.dest, tool.chmod, tool.chown) == ("/opt/tools", 0o755, "1000:1000")  # $TOOLS expanded
    assert heredoc.command == ("/bin/sh", "-c", 'echo "$GREETING" > /app/greeting.txt\n')
    assert plan.config.workdir == "/app" and plan.config.env["GREETING"] == "hello world"
    assert plan.config.labels == {"org.example.task": "demo"}
    assert any("CMD ignored" in note for note in plan.notes)


def test_the_plan_digest_follows_the_dockerfile_and_every_file_of_its_context(tmp_path):
    first = _plan(tmp_path, "FROM debian:bookworm\nCOPY a.txt /a.txt\n", {"a.txt": "one"})
    same = plan_dockerfile(tmp_path / "environment" / "Dockerfile")
    (tmp_path / "environment" / "a.txt").write_text("two")
    edited = plan_dockerfile(tmp_path / "environment" / "Dockerfile")
    assert first.digest == same.digest != edited.digest
    assert first.steps[0].material != edited.steps[0].material  # the COPY layer's key changes with the file


def test_python_slim_maps_to_debians_python_and_says_so(tmp_path):
    exact = _plan(tmp_path, "FROM python:3.11-slim\n").base
    near = _plan(tmp_path, "FROM python:3.12-slim\n")
    pinned = _plan(tmp_path, "FROM python:3.10-slim-trixie\n").base
    assert (exact.suite, exact.python) == ("bookworm", "3.11")
    assert near.base.suite == "trixie" and any("Python 3.12" in n and "3.13" in n for n in near.notes), near.notes
    assert pinned.suite == "trixie"


@pytest.mark.parametrize("dockerfile, files, named, reason", [
    ("FROM alpine:3.20\n", {}, "line 1: FROM alpine:3.20", "not in the supported subset"),
    ("FROM ubuntu:24.10\n", {}, "line 1: FROM ubuntu:24.10", "the Ubuntu tag '24.10' is not one"),
    ("FROM ghcr.io/some-org/toolbox:1.2\n", {}, "line 1", "no image registry"),
    ("FROM python:3.11\n", {}, "line 1: FROM python:3.11", "python:3.X-slim"),
    ("FROM debian:bookworm AS build\nRUN true\nFROM debian:bookworm\n", {}, "line 3: FROM debian:bookworm",
     "multi-stage builds are not supported"),
    ("FROM debian:bookworm\nCOPY --from=build /x /x\n", {}, "line 2: COPY --from=build /x /x", "multi-stage"),
    ("FROM debian:bookworm\nADD https://example.com/x.tgz /x\n", {}, "line 2: ADD https://example.com/x.tgz /x",
     "downloading at build time is not supported"),
    ("FROM debian:bookworm\nENTRYPOINT [\"/start.sh\"]\n", {}, 'line 2: ENTRYPOINT ["/start.sh"]',
     "no process outlives a command"),
    ("FROM debian:bookworm\nRUN --mount=type=cache,target=/root/.cache pip install x\n", {}, "line 2: RUN --mount",
     "RUN --mount"),
    ("FROM debian:bookworm\nFROBNICATE x\n", {}, "line 2: FROBNICATE x", "unknown instruction 'FROBNICATE'"),
    ("FROM debian:bookworm\nCOPY missing.txt /\n", {}, "line 2: COPY missing.txt /", "does not exist in the build"),
    ("FROM debian:bookworm\nCOPY ../outside /\n", {}, "line 2", "outside the build context"),
    ("FROM --platform=linux/arm64 debian:bookworm\n", {}, "line 1", "linux/amd64 only"),
    ("RUN echo hi\nFROM debian:bookworm\n", {}, "line 1: RUN echo hi", "before FROM"),
    ("FROM debian:bookworm\nRUN <<EOF\necho never closed\n", {}, "line 2: RUN <<EOF", "never closed"),
])
def test_what_falls_outside_the_subset_is_refused_naming_the_instruction(tmp_path, dockerfile, files, named, reason):
    with pytest.raises(DockerfileRefused) as info:
        _plan(tmp_path, dockerfile, files)
    message = str(info.value)
    assert named in message and reason in message, message
    assert str(tmp_path / "environment" / "Dockerfile") in message


def test_ubuntu_and_terminal_benchs_base_images_are_rebuilt_from_ubuntus_archive(tmp_path):
    ubuntu = _plan(tmp_path, "FROM ubuntu:22.04\n").base
    tbench = _plan(tmp_path, "FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624\n")
    assert (ubuntu.distro, ubuntu.suite, ubuntu.packages) == ("ubuntu", "jammy", ())
    assert (tbench.base.distro, tbench.base.suite, tbench.base.packages) == ("ubuntu", "noble", ("tmux", "asciinema"))
    assert any("plus tmux, asciinema" in note for note in tbench.notes), tbench.notes


def test_the_dockerignore_is_honoured(tmp_path):
    files = {".dockerignore": "*.log\nsecret/\n", "a.py": "x", "b.log": "y", "secret/key": "z"}
    plan = _plan(tmp_path, "FROM debian:bookworm\nCOPY . /src/\n", files)
    (tmp_path / "environment" / "b.log").write_text("changed")  # ignored: not part of the copy
    assert plan_dockerfile(tmp_path / "environment" / "Dockerfile").steps[0].content_digest == \
        plan.steps[0].content_digest
    (tmp_path / "environment" / "a.py").write_text("changed")
    assert plan_dockerfile(tmp_path / "environment" / "Dockerfile").steps[0].content_digest != \
        plan.steps[0].content_digest
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(DockerfileRefused, match="excluded by .*dockerignore"):
        _plan(other, "FROM debian:bookworm\nCOPY b.log /\n", files)


def test_a_heredoc_in_a_shell_command_stays_the_shells(tmp_path):
    plan = _plan(tmp_path, "FROM debian:bookworm\nRUN cat > /etc/app.yml << 'EOF'\nname: CI\nFROM: not an instruction\n"
                           "EOF\nWORKDIR /app\n")
    run, workdir = plan.steps
    assert run.command[-1] == "cat > /etc/app.yml << 'EOF'\nname: CI\nFROM: not an instruction\nEOF\n"
    assert workdir.dest == "/app" and workdir.line == 6


def test_shell_words_quote_escape_and_expand_like_docker():
    env = {"A": "x y", "EMPTY": ""}
    assert shell_words('k="$A" j=\'$A\' l=a\\ b m=${EMPTY:-dflt} n=${A:+set}', env) == \
        ["k=x y", "j=$A", "l=a b", "m=dflt", "n=set"]
