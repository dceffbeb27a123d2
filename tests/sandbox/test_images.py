"""Images built offline from a Dockerfile plan (sandbox.images), for real: Debian's archive via
mmdebstrap, steps replayed under bubblewrap. The base layer (debian:bookworm-slim) is the one the
built-in terminal suite uses, so the shared store (ASSAY_IMAGE_CACHE) has it after the first build on
a machine; the steps built here are a few KB each."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from sandbox.dockerfile import plan_dockerfile
from sandbox.images import BuildError, ImageStore
from tests.sandbox.sandbox_helpers import needs_images

pytestmark = needs_images


@pytest.fixture
def store() -> ImageStore:
    return ImageStore(os.environ["ASSAY_IMAGE_CACHE"])


def _plan(folder: Path, dockerfile: str, files: dict[str, str] | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    (folder / "Dockerfile").write_text(dockerfile)
    return plan_dockerfile(folder / "Dockerfile")


def _build(store, plan):
    events = []
    image = store.build(plan, progress=events.append, timeout_s=900)
    return image, [e["state"] for e in events if e["state"] != "building"]


def test_layers_are_shared_by_prefix_and_an_edit_rebuilds_only_from_there_on(store, tmp_path):
    token = uuid.uuid4().hex
    common = "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY greeting.txt ./\n"
    first, _ = _build(store, _plan(tmp_path / "a", common + f"RUN echo {token} > /app/token\n",
                                   {"greeting.txt": "hello\n"}))
    again, states = _build(store, _plan(tmp_path / "a", common + f"RUN echo {token} > /app/token\n"))
    assert again.layer_paths == first.layer_paths and states == []  # the image record answers: no layer looked at
    edited, states = _build(store, _plan(tmp_path / "b", common + f"RUN echo {token}-edited > /app/token\n",
                                         {"greeting.txt": "hello\n"}))
    assert states == ["cached", "cached", "cached", "built"]
    assert edited.layer_paths[:3] == first.layer_paths[:3] and edited.layer_paths[3] != first.layer_paths[3]
    assert (edited.layer_paths[3] / "app" / "token").read_text() == f"{token}-edited\n"
    assert edited.record["layers"] and edited.record["bytes"] > 50 << 20  # the base is in it


def test_a_failing_run_names_its_step_and_shows_its_output(store, tmp_path):
    token = uuid.uuid4().hex
    plan = _plan(tmp_path, f"FROM debian:bookworm-slim\nRUN echo before-{token} && echo oops-{token} >&2 && exit 3\n")
    with pytest.raises(BuildError) as info:
        store.build(plan, timeout_s=900)
    message = str(info.value)
    assert "line 2: RUN echo before-" in message and f"before-{token}" in message and f"oops-{token}" in message
    assert "exited 3" in message
    assert store.get(plan) is None and not list(store.layers_dir.glob("*.partial-*"))  # nothing half-built kept


def test_copy_and_workdir_never_follow_a_link_out_of_the_image(store, tmp_path):
    """A link in the image pointing at /etc must lead to the image's /etc, never the host's: the
    builder runs as root."""
    name = f"assay-escape-{uuid.uuid4().hex[:12]}"
    plan = _plan(tmp_path, f"FROM debian:bookworm-slim\nRUN ln -s /etc /evil && ln -s ../../etc /evil2\n"
                           f"COPY {name} /evil/\nCOPY {name} /evil2/{name}.2\nWORKDIR /evil/{name}.d\n",
                 {name: "planted\n"})
    image = store.build(plan, timeout_s=900)
    assert not Path("/etc", name).exists() and not Path("/etc", f"{name}.2").exists()
    assert not Path("/etc", f"{name}.d").exists()
    copied, copied2, made = image.layer_paths[2], image.layer_paths[3], image.layer_paths[4]
    assert (copied / "etc" / name).read_text() == "planted\n" and (copied2 / "etc" / f"{name}.2").is_file()
    assert (made / "etc" / f"{name}.d").is_dir()


def test_add_unpacks_a_local_archive_and_copy_sets_owner_and_mode(store, tmp_path):
    import tarfile

    context = tmp_path / "ctx"
    (context / "tree" / "inner").mkdir(parents=True)
    (context / "tree" / "inner" / "f.txt").write_text("inside\n")
    with tarfile.open(context / "bundle.tar.gz", "w:gz") as tar:
        tar.add(context / "tree", arcname="tree")
    token = uuid.uuid4().hex[:8]
    plan = _plan(context, f"FROM debian:bookworm-slim\nRUN useradd -u 1234 dev\nWORKDIR /srv/{token}\n"
                          "ADD bundle.tar.gz ./\nCOPY --chown=dev:dev --chmod=640 tree/inner/f.txt ./owned.txt\n")
    image = store.build(plan, timeout_s=900)
    added, copied = image.layer_paths[3], image.layer_paths[4]
    assert (added / "srv" / token / "tree" / "inner" / "f.txt").read_text() == "inside\n"
    st = (copied / "srv" / token / "owned.txt").stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1234, 1234, 0o640)


@pytest.mark.slow
def test_a_base_build_mounts_nothing_in_the_hosts_namespace_and_a_killed_one_leaves_no_mount(tmp_path):
    """mmdebstrap mounts proc, sys, devpts and a tmpfs in the root it builds; run in the host's mount
    namespace, a build killed midway left them mounted in the store (a later rm -rf of the store walked
    into the host's /proc). It runs in a namespace of its own: the host never sees them."""
    import signal
    import subprocess
    import sys
    import time

    store = tmp_path / "store"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM debian:bookworm\n")  # not -slim: a cold base of its own
    build = subprocess.Popen(
        [sys.executable, "-c", "import sys; from sandbox.dockerfile import plan_dockerfile; "
         "from sandbox.images import ImageStore; ImageStore(sys.argv[1]).build(plan_dockerfile(sys.argv[2]))",
         str(store), str(tmp_path / "ctx" / "Dockerfile")], start_new_session=True)
    seen, deadline, installing_since = [], time.monotonic() + 90, None
    try:
        while time.monotonic() < deadline and build.poll() is None:
            seen += [line for line in Path("/proc/mounts").read_text().splitlines() if str(store) in line]
            status = list(store.glob("layers/*.partial-*/diff/var/lib/dpkg/status"))
            if installing_since is None and status and status[0].stat().st_size > 10_000:
                installing_since = time.monotonic()  # mmdebstrap is installing packages: its mounts are up
            if installing_since is not None and time.monotonic() - installing_since > 3:
                break
            time.sleep(0.2)
        assert build.poll() is None and installing_since is not None, "the build was not caught midway"
    finally:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()
    time.sleep(1)  # the namespace goes with its last process
    after = [line for line in Path("/proc/mounts").read_text().splitlines() if str(store) in line]
    assert seen == [] and after == [], (seen[:3], after[:3])
