"""The team profile's services on one machine: a real PostgreSQL and an S3-compatible server.

For trying the team profile (``make team-up``) and for its end-to-end test: PostgreSQL from the
system's packages (Debian's ``postgresql``), started on a private data folder and port, with the
three databases of :data:`storage.deployment.DATABASES`; moto's S3 server (``moto_server``) with
one bucket. A real team points ``ASSAY_POSTGRES_URL`` and ``ASSAY_S3_*`` at its own servers.

    python -m storage.team_services up      # start both, write <folder>/team.env, return
    python -m storage.team_services down    # stop both and remove their folder
    python -m storage.team_services status

PostgreSQL refuses to run as root, so as root its processes run as the ``postgres`` user.
Authentication is ``trust`` on 127.0.0.1 only: a local trial, not a production setup. moto keeps
objects in memory, so ``down`` also removes the PostgreSQL data (a catalog kept without the
bucket's files would point at nothing): a trial. Use MinIO or a cloud bucket for anything you keep.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from storage.deployment import DATABASES

DEFAULT_FOLDER = ".assay-team"
DEFAULT_BUCKET = "assay"
# moto accepts any key pair; boto and pyiceberg need one to sign requests
TEST_KEYS = {"AWS_ACCESS_KEY_ID": "assay", "AWS_SECRET_ACCESS_KEY": "assay-secret"}


class ServiceError(RuntimeError):
    """A service could not be started or reached, with how to fix it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True) or \
        ([shutil.which(name)] if shutil.which(name) else [])
    if not found:
        raise ServiceError(f"PostgreSQL's {name} is not installed: `apt-get install postgresql` (Debian/Ubuntu) "
                           "or point ASSAY_POSTGRES_URL at an existing server")
    return found[0]


def _as_postgres_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@dataclass
class TeamServices:
    """A running PostgreSQL + S3 server pair under ``folder``."""

    folder: Path
    pg_port: int
    s3_port: int
    bucket: str = DEFAULT_BUCKET

    @property
    def postgres_url(self) -> str:
        return f"postgresql://assay@127.0.0.1:{self.pg_port}/postgres"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self, profile: str = "team") -> dict[str, str]:
        """The environment that points Assay's team profile at these services."""
        return {"ASSAY_PROFILE": profile, "ASSAY_POSTGRES_URL": self.postgres_url,
                "ASSAY_S3_ENDPOINT": self.s3_endpoint, "ASSAY_S3_BUCKET": self.bucket,
                "AWS_DEFAULT_REGION": "us-east-1", **TEST_KEYS}

    # -- start / stop ----------------------------------------------------------------------------

    @classmethod
    def start(cls, folder: str | os.PathLike, *, pg_port: int | None = None, s3_port: int | None = None,
              bucket: str = DEFAULT_BUCKET) -> "TeamServices":
        folder = Path(folder).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        services = cls(folder, pg_port or free_port(), s3_port or free_port(), bucket)
        if (folder / "postgres" / "postmaster.pid").exists() or (folder / "s3.pid").exists():
            raise ServiceError(f"team services already run under {folder} (`python -m storage.team_services status "
                               f"--folder {folder}`); stop them first (`make team-down`)")
        try:
            services._start_postgres()
            services._start_s3()
        except BaseException:
            services.stop()  # only this call's: the check above refused a folder with running services
            raise
        (folder / "team.env").write_text("".join(f"export {k}={v}\n" for k, v in services.env().items()))
        return services

    def _start_postgres(self) -> None:
        data = self.folder / "postgres"
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        if not (data / "PG_VERSION").exists():
            data.mkdir(exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(data, "postgres")
            _run(_as_postgres_user([_postgres_bin("initdb"), "-D", str(data), "-U", "assay", "--auth=trust",
                                    "-E", "UTF8", "--no-instructions"]), "initdb")
        log = self.folder / "postgres.log"
        if os.geteuid() == 0 and not log.exists():
            log.touch()
            shutil.chown(log, "postgres")
        options = f"-p {self.pg_port} -c listen_addresses=127.0.0.1 -k {data} -c max_connections=200"
        _run(_as_postgres_user([_postgres_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(log),
                                "-w", "-t", "60", "start"]), f"pg_ctl start (log: {log})")
        self._create_databases()

    def _create_databases(self) -> None:
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                con = psycopg2.connect(self.postgres_url)
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise ServiceError(f"PostgreSQL on port {self.pg_port} did not accept connections "
                                       f"(log: {self.folder / 'postgres.log'})") from None
                time.sleep(0.3)
        con.autocommit = True
        with con.cursor() as cur:
            cur.execute("SELECT datname FROM pg_database")
            existing = {row[0] for row in cur.fetchall()}
            for name in DATABASES.values():
                if name not in existing:
                    cur.execute(f'CREATE DATABASE "{name}"')
        con.close()

    def _start_s3(self) -> None:
        server = Path(sys.executable).with_name("moto_server")
        if not server.exists():
            raise ServiceError("moto's S3 server is not installed: `pip install 'moto[server]'` (the `team` extra)")
        log = open(self.folder / "s3.log", "ab")
        process = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(self.s3_port)], stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        (self.folder / "s3.pid").write_text(str(process.pid))
        import boto3
        import botocore.exceptions

        client = boto3.client("s3", endpoint_url=self.s3_endpoint, region_name="us-east-1",
                              aws_access_key_id=TEST_KEYS["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=TEST_KEYS["AWS_SECRET_ACCESS_KEY"])
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket=self.bucket)
                return
            except client.exceptions.BucketAlreadyOwnedByYou:
                return
            except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise ServiceError(f"the S3 server did not start on port {self.s3_port} "
                                       f"(log: {self.folder / 's3.log'})") from None
                time.sleep(0.3)

    def stop(self) -> None:
        data = self.folder / "postgres"
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_postgres_user([_postgres_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                           capture_output=True)
        pid_file = self.folder / "s3.pid"
        if pid_file.exists():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError, PermissionError):
                pass
            pid_file.unlink(missing_ok=True)


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ServiceError(f"{what} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-1500:]}")


def _read_env(folder: Path) -> dict[str, str]:
    env = {}
    for line in (folder / "team.env").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m storage.team_services",
                                     description="Start or stop a local PostgreSQL and S3 server for Assay's team profile.")
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--folder", default=DEFAULT_FOLDER, help=f"where their data and logs live (default: {DEFAULT_FOLDER})")
    parser.add_argument("--pg-port", type=int, default=55432, help="PostgreSQL port (default: 55432)")
    parser.add_argument("--s3-port", type=int, default=59000, help="S3 server port (default: 59000)")
    args = parser.parse_args(argv)
    folder = Path(args.folder).resolve()
    if args.action == "down":
        if not (folder / "team.env").exists():
            print(f"nothing to stop under {folder}")
            return 0
        env = _read_env(folder)
        TeamServices(folder, int(env["ASSAY_POSTGRES_URL"].rsplit(":", 1)[1].split("/")[0]),
                     int(env["ASSAY_S3_ENDPOINT"].rsplit(":", 1)[1])).stop()
        # moto's objects lived in its memory: a catalog kept without them would point at lost files
        shutil.rmtree(folder, ignore_errors=True)
        print(f"stopped the team services and removed {folder} (a trial's state: the S3 server kept it in memory)")
        return 0
    if args.action == "status":
        if not (folder / "team.env").exists():
            print(f"no team services under {folder}: `make team-up` starts them")
            return 1
        print((folder / "team.env").read_text(), end="")
        return 0
    try:
        services = TeamServices.start(folder, pg_port=args.pg_port, s3_port=args.s3_port)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"PostgreSQL on {services.postgres_url} (databases {', '.join(DATABASES.values())}), "
          f"S3 on {services.s3_endpoint} (bucket {services.bucket}).\n"
          f"Use the team profile in a shell with:  source {folder / 'team.env'}\n"
          f"Stop them with:  make team-down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
