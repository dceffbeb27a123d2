"""Episodes on an image's filesystem (sandbox.image_episode), for real: id-mapped overlay mounts,
bubblewrap, control groups. The image is debian:bookworm-slim plus a few cheap steps (its base is
the built-in terminal suite's, in the shared store)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from sandbox.dockerfile import plan_dockerfile
from sandbox.image_episode import EpisodeLimits, ImageEpisode, read_rewards
from sandbox.images import ImageStore
from sandbox.mounts import MOUNT_PREFIX
from tests.sandbox.sandbox_helpers import needs_images

pytestmark = needs_images

DOCKERFILE = """\
FROM debian:bookworm-slim
ENV GREETING="hello from the image"
RUN useradd --create-home --uid 1000 agent && mkdir -p /opt/tool && echo 'echo genuine' > /opt/tool/run.sh
WORKDIR /app
COPY start.txt ./
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    context = tmp_path_factory.mktemp("image")
    (context / "start.txt").write_text("start\n")
    (context / "Dockerfile").write_text(DOCKERFILE)
    return ImageStore(os.environ["ASSAY_IMAGE_CACHE"]).build(plan_dockerfile(context / "Dockerfile"), timeout_s=900)


def _tests(tmp_path: Path, script: str) -> Path:
    folder = tmp_path / f"tests-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    (folder / "test.sh").write_text(script)
    return folder


def _our_mounts() -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [line for line in text.splitlines() if f"{MOUNT_PREFIX}{os.getpid()}-" in line]


def test_the_agent_is_root_of_its_own_image_and_its_changes_persist(image):
    with ImageEpisode(image, timeout_s=60) as episode:
        first = episode.run('id -un; pwd; cat start.txt; echo "$GREETING"; echo 1 > /etc/marker; '
                            'echo x >> /etc/hostname; touch /usr/bin/planted')
        second = episode.run("cat /etc/marker; ls /usr/bin/planted; head -1 /etc/shadow | cut -d: -f1")
    assert first.exit_code == 0, first.output
    assert first.output.splitlines()[:4] == ["root", "/app", "start", "hello from the image"]
    assert second.output.split() == ["1", "/usr/bin/planted", "root"]  # root's own files, even mode 0640


def test_nothing_of_the_host_is_there_and_the_image_is_untouched(image, tmp_path):
    marker = tmp_path / f"host-marker-{uuid.uuid4().hex}"
    marker.write_text("host")
    with ImageEpisode(image, timeout_s=60) as episode:
        probe = episode.run(f"echo found=$(find / -xdev -name '{marker.name}' 2>/dev/null | head -1); "
                            "echo processes=$(ls /proc | grep -c '^[0-9]'); echo tampered > /app/start.txt")
        assert not (episode.root / "tests").exists()
    found, processes = (line.split("=", 1)[1] for line in probe.output.splitlines()[:2])
    assert found == "" and int(processes) < 10, probe.output  # its own few processes, no host file
    assert all(not (layer / "app" / "start.txt").exists() or (layer / "app" / "start.txt").read_text() == "start\n"
               for layer in image.layer_paths)


def test_no_network_unless_asked(image):
    with ImageEpisode(image, timeout_s=60) as episode:
        offline = episode.run("exec 3<>/dev/tcp/1.1.1.1/80 && echo connected")
    assert offline.exit_code != 0 and "connected" not in offline.output
    assert "unreachable" in offline.output.lower() or "network" in offline.output.lower(), offline.output


def test_storage_memory_and_time_are_capped(image):
    limits = EpisodeLimits(cpus=1, memory_mb=96, storage_mb=16, processes=64)
    with ImageEpisode(image, limits=limits, timeout_s=8) as episode:
        disk = episode.run("for i in 1 2 3 4; do head -c 6000000 /dev/zero > /app/big$i || break; done; "
                           "du -cb /app/big* | tail -1 | cut -f1")
        memory = episode.run("x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}")
        slow = episode.run("sleep 30; echo woke")
        late = episode.run("echo too late")
        enforced = episode.enforced
    assert "No space left on device" in disk.output and int(disk.output.split()[-1]) <= 16 << 20, disk.output
    if "memory_mb" in enforced:
        assert memory.exit_code != 0 and "out of memory" in memory.output, memory.output
    assert slow.timed_out and "woke" not in slow.output and "time left" in slow.output
    assert late.timed_out and "time is up" in late.output


def test_the_image_user_is_who_the_agent_is(image):
    with ImageEpisode(image, user="agent", workdir="/home/agent", timeout_s=60) as episode:
        result = episode.run("id -un; pwd; touch mine && ls -l mine | cut -d' ' -f3; touch /etc/nope 2>&1 | tail -1")
    lines = result.output.splitlines()
    assert lines[:3] == ["agent", "/home/agent", "agent"] and "Permission denied" in lines[3], result.output


def test_tests_appear_only_for_the_verifier_and_rewards_are_read(image, tmp_path):
    tests = _tests(tmp_path, 'ls /tests > /logs/verifier/seen.txt\n'
                             'echo \'{"reward": 0.75, "style": 1, "label": "x"}\' > /logs/verifier/reward.json\n')
    (tests / "helper.py").write_text("pass\n")
    with ImageEpisode(image, timeout_s=60) as episode:
        during = episode.run("ls /tests 2>&1; ls /logs 2>&1")
        verdict = episode.verify(tests, timeout_s=30)
    assert "No such file or directory" in during.output
    assert verdict.rewards == {"reward": 0.75, "style": 1.0} and verdict.error is None  # non-numbers dropped


def test_shared_verifier_sees_the_agents_tampering_and_a_separate_one_does_not(image, tmp_path):
    tests = _tests(tmp_path, 'out=$(bash /opt/tool/run.sh)\n'
                             '[ "$out" = genuine ] && [ -f /app/answer ] && r=1 || r=0\n'
                             'echo $r > /logs/verifier/reward.txt\n')
    with ImageEpisode(image, timeout_s=60) as episode:
        episode.run("echo 42 > /app/answer; echo 'echo genuine; exit 0' > /opt/tool/run.sh; "
                    "echo 'echo forged' > /opt/tool/run.sh")
        shared = episode.verify(tests, timeout_s=30)
        separate = episode.verify(tests, timeout_s=30, separate=True, artifacts=["/app"])
        nothing = episode.verify(tests, timeout_s=30, separate=True, artifacts=[])
    assert shared.rewards == {"reward": 0.0}    # Harbor's shared mode: the tests run on what the agent left
    assert separate.rewards == {"reward": 1.0}  # a fresh image with only /app copied in
    assert nothing.rewards == {"reward": 0.0}


def test_the_verifier_cannot_fill_the_host_or_hang_on_what_the_agent_left(image, tmp_path):
    import time

    tests = _tests(tmp_path, "head -c 200000000 /dev/zero > /logs/verifier/junk; rm -f /logs/verifier/junk\n"
                             "[ -e /app/pipe ] && r=0 || r=1; echo $r > /logs/verifier/reward.txt\n")
    with ImageEpisode(image, timeout_s=60) as episode:
        episode.run("mkfifo /app/pipe")
        started = time.monotonic()
        verdict = episode.verify(tests, timeout_s=30, separate=True, artifacts=["/app/pipe", "/app"])
    assert time.monotonic() - started < 20 and verdict.rewards == {"reward": 1.0}, verdict.output  # no FIFO copied
    assert "No space left on device" in verdict.output  # /logs/verifier is a capped tmpfs, not the host's disk


def test_closing_unmounts_everything_and_removes_the_control_group(image):
    episode = ImageEpisode(image, limits=EpisodeLimits(cpus=1, memory_mb=256, storage_mb=32), timeout_s=60)
    root, group = episode.root, episode.group
    episode.run("sleep 0.1 & echo started")
    assert _our_mounts()
    episode.close()
    assert not _our_mounts() and not root.exists()
    assert group is None or not any(folder.exists() for folder in group.folders)


def test_reward_files_are_read_strictly(tmp_path):
    (tmp_path / "reward.txt").write_text("0.5\n")
    assert read_rewards(tmp_path) == ({"reward": 0.5}, None)
    (tmp_path / "reward.txt").write_text("passed\n")
    assert read_rewards(tmp_path)[1] == "reward.txt holds 'passed', not a number"
    (tmp_path / "reward.json").write_text("[1, 2]")
    assert "must map metric names" in read_rewards(tmp_path)[1]  # reward.json wins over reward.txt
    (tmp_path / "reward.json").unlink()
    (tmp_path / "reward.txt").unlink()
    assert read_rewards(tmp_path) == ({}, "the verifier wrote neither /logs/verifier/reward.txt nor reward.json")
