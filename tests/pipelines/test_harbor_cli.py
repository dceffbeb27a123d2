"""`assay tasks import harbor | build | check | migrate`, run for real as a user does (subprocess CLI,
images from Debian's archive, bubblewrap)."""

from __future__ import annotations

import json

from tests.conftest import run_cli, write_task_suite
from tests.domains.harbor_helpers import write_harbor_suite, write_harbor_task
from tests.sandbox.sandbox_helpers import needs_images

pytestmark = needs_images
# a command that may build an image: the first build on a machine (the base from the archive) takes
# minutes on a loaded 2-core machine; later ones find it in the shared store (ASSAY_IMAGE_CACHE)
BUILDS = 1800


def test_import_build_check_and_list_an_imported_suite(tmp_path, assay_home):
    source = write_harbor_suite(tmp_path / "src")
    imported = run_cli("tasks", "import", "harbor", str(source), "--suite", "shell_harbor", "--json")
    assert imported.returncode == 0, imported.stderr
    payload = json.loads(imported.stdout)
    assert payload["suite"] == "shell_harbor" and {t["task"] for t in payload["tasks"]} == {"metrics", "upper-a",
                                                                                           "upper-b"}
    assert payload["tasks"][0]["base"] == "debian:bookworm-slim" and payload["tasks"][0]["network"] is False
    built = run_cli("tasks", "build", "shell_harbor", "--json", timeout=BUILDS)
    assert built.returncode == 0, built.stderr
    assert {r["task"] for r in json.loads(built.stdout)} == {"metrics", "upper-a", "upper-b"}
    checked = run_cli("tasks", "check", "shell_harbor", "--json", "--timeout-multiplier", "2", timeout=BUILDS)
    assert checked.returncode == 0, checked.stderr
    rows = json.loads(checked.stdout)
    assert all(r["ok"] and r["oracle_passed"] and r["do_nothing_failed"] for r in rows), rows
    listed = run_cli("domains", "list", "--tag", "harbor", "--json")
    assert listed.returncode == 0 and "shell_harbor" in [r["name"] for r in json.loads(listed.stdout)], listed.stderr


def test_an_unsupported_dockerfile_is_refused_before_anything_runs(tmp_path, assay_home, monkeypatch):
    store = tmp_path / "empty-store"
    suite = tmp_path / "src"
    write_harbor_task(suite, "fine")
    write_harbor_task(suite, "two-stage", dockerfile="FROM debian:bookworm-slim AS build\nRUN echo built > /x\n"
                                                     "FROM debian:bookworm-slim\nCOPY --from=build /x /x\n")
    env = {"ASSAY_IMAGE_CACHE": str(store)}
    for args in (("tasks", "import", "harbor", str(suite)), ("tasks", "check", str(suite)),
                 ("tasks", "build", str(suite))):
        out = run_cli(*args, env=env)
        assert out.returncode == 2 and out.stdout == "", (args, out.stdout, out.stderr)
        assert "two-stage" in out.stderr and "line 3: FROM debian:bookworm-slim" in out.stderr, out.stderr
        assert "multi-stage builds are not supported" in out.stderr
    assert not store.exists() and not (assay_home / "tasks").exists()  # nothing built, nothing imported


def test_a_broken_harbor_task_is_reported_with_exit_1(tmp_path, assay_home):
    suite = tmp_path / "src"
    write_harbor_task(suite, "good")
    write_harbor_task(suite, "lax", test_sh="#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    write_harbor_task(suite, "silent", test_sh="#!/bin/bash\ntrue\n")
    (write_harbor_task(suite, "no-oracle") / "solution" / "solve.sh").unlink()
    out = run_cli("tasks", "check", str(suite), "--json", timeout=BUILDS)
    assert out.returncode == 1, out.stderr
    rows = {r["task"]: r for r in json.loads(out.stdout)}
    assert rows["good"]["ok"] and not rows["lax"]["do_nothing_failed"]
    assert not rows["silent"]["oracle_passed"] and "wrote neither /logs/verifier/reward.txt" in rows["silent"]["detail"]
    unchecked = rows["no-oracle"]
    assert not unchecked["ok"] and unchecked["do_nothing_failed"] and "no oracle" in unchecked["detail"]


def test_migrate_writes_harbor_folders_that_check(tmp_path, assay_home):
    old = write_task_suite(tmp_path)
    out = run_cli("tasks", "migrate", str(old), str(tmp_path / "new"), "--json")
    assert out.returncode == 0, out.stderr
    assert sorted(r["task"] for r in json.loads(out.stdout)) == ["count", "hello", "upper"]
    assert (tmp_path / "new" / "count" / "task.toml").is_file() and (tmp_path / "new" / "count" / "tests" /
                                                                       "run.sh").is_file()
    checked = run_cli("tasks", "check", str(tmp_path / "new"), timeout=BUILDS)
    assert checked.returncode == 0 and "3/3 tasks ok" in checked.stdout, checked.stdout + checked.stderr
    again = run_cli("tasks", "migrate", str(old), str(tmp_path / "new"))
    assert again.returncode == 2 and "already exists" in again.stderr
