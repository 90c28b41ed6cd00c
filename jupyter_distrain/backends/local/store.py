"""Persistent job records (SQLite): every process — CLI, supervisor, Jupyter server — sees the same jobs."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Iterator, cast

from ...errors import StorageError, StorageFull
from ...reasons import NOTICES
from ...records import Notice, running_notice
from ...usage import row_key

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    spec TEXT NOT NULL,
    phase TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT '',
    exit_code INTEGER,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    run INTEGER NOT NULL DEFAULT 1,
    output_dir TEXT NOT NULL,
    supervisor_pid INTEGER,
    supervisor_started REAL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    owner TEXT NOT NULL DEFAULT '',
    environment TEXT
);
CREATE TABLE IF NOT EXISTS replicas (
    job TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    idx INTEGER NOT NULL,
    phase TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    exit_code INTEGER,
    address TEXT,
    pid INTEGER,
    pid_started REAL,
    started REAL,
    finished REAL,
    restarts INTEGER NOT NULL DEFAULT 0,
    cpu_seconds REAL,  -- its processes' in the run, once ended (accounted.py)
    peak_memory INTEGER,
    PRIMARY KEY (job, name)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,
    time REAL NOT NULL,
    type TEXT NOT NULL,
    replica TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (  -- the runs a restart or a delete ended (StoreLedger), kept after their job
    key TEXT PRIMARY KEY,
    finished REAL,
    row TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (  -- each run of a job that a restart ended (records.run_record)
    job TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,
    run INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (job, run)
);
CREATE INDEX IF NOT EXISTS ledger_by_end ON ledger (finished);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job, id);
CREATE INDEX IF NOT EXISTS events_by_reason ON events (reason, job);  -- each job's newest notice (`notices`)
"""

ADDED_COLUMNS = {"jobs": {"owner": "TEXT NOT NULL DEFAULT ''", "environment": "TEXT"},
                 "replicas": {"cpu_seconds": "REAL", "peak_memory": "INTEGER"}}


class Store:
    """Job records; each thread gets its own connection (the server calls in from a thread pool). A database
    that cannot be read or written raises StorageError (StorageFull when the disk is), never leaving a
    connection inside a transaction: once space is freed, everything works again."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.local = threading.local()
        self.watcher: sqlite3.Connection | None = None  # reads `version` alone
        self.watching = threading.Lock()
        with self._errors():
            self.db.executescript(SCHEMA)
            for table, added in ADDED_COLUMNS.items():  # a database made before them
                columns = {column["name"] for column in self.db.execute(f"PRAGMA table_info({table})")}
                for column, definition in added.items():
                    if column not in columns:
                        self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")

    @property
    def db(self) -> sqlite3.Connection:
        db = getattr(self.local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            self.local.db = db
        return db

    def close(self) -> None:
        """Close this thread's connection (and the one that reads `version`)."""
        if getattr(self.local, "db", None) is not None:
            self.local.db.close()
            self.local.db = None
        with self.watching:
            if self.watcher is not None:
                self.watcher.close()
                self.watcher = None

    def version(self) -> int:
        """A number that changes whenever a change to the database is committed, by any process or thread:
        SQLite's data_version, read by a connection of its own, which writes nothing."""
        with self.watching, self._errors():
            if self.watcher is None:
                self.watcher = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            return self.watcher.execute("PRAGMA data_version").fetchone()[0]

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors as StorageError; a taken name (IntegrityError) stays what it is."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise
        except sqlite3.DatabaseError as e:
            error = StorageFull if getattr(e, "sqlite_errorname", "") == "SQLITE_FULL" else StorageError
            raise error(f"the job database {self.path} cannot be used: {e}") from None

    def _run(self, sql: str, parameters: tuple | list = ()) -> list[sqlite3.Row]:
        with self._errors():
            return self.db.execute(sql, parameters).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Every statement run within commits together, or none does."""
        self._run("BEGIN IMMEDIATE")
        try:
            yield
            self._run("COMMIT")
        except BaseException:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.Error:
                self.close()  # no connection stays in a transaction, holding the database's write lock
            raise

    # jobs
    def insert_job(self, name: str, backend: str, spec: dict, output_dir: str, replicas: list[tuple[str, int]],
                   owner: str) -> None:
        """Create the job and its replicas at once; raises sqlite3.IntegrityError if the name is taken."""
        with self.transaction():
            self._run(
                "INSERT INTO jobs (name, backend, spec, phase, created, output_dir, owner)"
                " VALUES (?, ?, ?, 'Pending', ?, ?, ?)",
                (name, backend, json.dumps(spec), time.time(), output_dir, owner),
            )
            self._insert_replicas(name, replicas)

    def reset_job(self, name: str, spec: dict, output_dir: str, replicas: list[tuple[str, int]], ended: dict) -> None:
        """Start a new run of an existing job (restart), with a possibly edited spec, keeping the run it ended
        (`ended`, records.run_record)."""
        with self.transaction():
            self._run("INSERT OR REPLACE INTO runs VALUES (?, ?, ?)", (name, ended["run"], json.dumps(ended)))
            self._run(
                "UPDATE jobs SET spec=?, output_dir=?, phase='Pending', reason='', message='', exit_code=NULL,"
                " started=NULL, finished=NULL, run=run+1, supervisor_pid=NULL, supervisor_started=NULL,"
                " stop_requested=0, environment=NULL"
                " WHERE name=?",
                (json.dumps(spec), output_dir, name),
            )
            self._run("DELETE FROM replicas WHERE job=?", (name,))
            self._insert_replicas(name, replicas)

    def _insert_replicas(self, job: str, replicas: list[tuple[str, int]]) -> None:
        for role, i in replicas:
            self._run("INSERT INTO replicas (job, name, role, idx, phase) VALUES (?, ?, ?, ?, 'Pending')",
                      (job, f"{role}-{i}", role, i))

    def update_job(self, name: str, **fields: Any) -> None:
        self._update("jobs", "name=?", (name,), fields)

    def update_replica(self, job: str, replica: str, **fields: Any) -> None:
        self._update("replicas", "job=? AND name=?", (job, replica), fields)

    def _update(self, table: str, where: str, key: tuple, fields: dict) -> None:
        assignments = ", ".join(f"{column}=?" for column in fields)
        self._run(f"UPDATE {table} SET {assignments} WHERE {where}", (*fields.values(), *key))

    def earlier_run(self, name: str, run: int) -> dict | None:
        """The job's run `run` as its restart kept it; None if it was not kept."""
        rows = self._run("SELECT record FROM runs WHERE job=? AND run=?", (name, run))
        return json.loads(rows[0]["record"]) if rows else None

    def delete_job(self, name: str) -> None:
        self._run("DELETE FROM jobs WHERE name=?", (name,))

    def job(self, name: str) -> dict | None:
        rows = self._run("SELECT * FROM jobs WHERE name=?", (name,))
        return self._job(rows[0], self._run("SELECT * FROM replicas WHERE job=? ORDER BY rowid", (name,)),
                         self.notices(name).get(name)) if rows else None

    def jobs(self) -> list[dict]:
        """Every job, oldest first: three queries however many jobs there are."""
        jobs = self._run("SELECT * FROM jobs ORDER BY created")
        replicas: dict[str, list[sqlite3.Row]] = {}
        for row in self._run("SELECT * FROM replicas ORDER BY rowid"):
            replicas.setdefault(row["job"], []).append(row)
        notices = self.notices()
        return [self._job(row, replicas.get(row["name"], []), notices.get(row["name"])) for row in jobs]

    def summaries(self) -> list[dict]:
        """Every job without its spec (but its policy.ttl_after_finished and trial_of), oldest first, its replicas counted by
        phase (`replica_phases`), and the supervisor's pid and start time."""
        jobs = self._run("SELECT name, backend, owner, phase, reason, message, exit_code, run, created, started,"
                         " finished, supervisor_pid, supervisor_started,"
                         " json_extract(spec, '$.policy.ttl_after_finished') AS ttl_after_finished,"
                         " json_extract(spec, '$.trial_of') AS trial_of"
                         " FROM jobs ORDER BY created")
        phases: dict[str, dict[str, int]] = {}
        for job, phase, count in self._run("SELECT job, phase, count(*) FROM replicas GROUP BY job, phase"):
            phases.setdefault(job, {})[phase] = count
        notices = self.notices()
        return [{**row, "replica_phases": phases.get(row["name"], {}),
                 "notice": running_notice(row["phase"], row["started"], notices.get(row["name"]))} for row in jobs]

    def notices(self, job: str | None = None) -> dict[str, Notice]:
        """Each job's (or `job`'s) newest event of reasons.NOTICES."""
        reasons = ", ".join("?" * len(NOTICES))
        rows = self._run("SELECT job, reason, message, replica, max(time) AS time FROM events"
                         f" WHERE reason IN ({reasons}){' AND job=?' if job else ''} GROUP BY job",
                         (*NOTICES, *([job] if job else [])))
        return {row["job"]: cast(Notice, {key: row[key] for key in Notice.__annotations__}) for row in rows}

    @staticmethod
    def _job(row: sqlite3.Row, replicas: list[sqlite3.Row], notice: Notice | None) -> dict:
        job = dict(row)
        job["notice"] = running_notice(job["phase"], job["started"], notice)
        job["spec"] = json.loads(job["spec"])
        job["environment"] = json.loads(job["environment"] or "{}")
        job["stop_requested"] = bool(job["stop_requested"])
        job["replicas"] = [dict(r) for r in replicas]
        return job

    # events
    def add_event(self, job: str, reason: str, message: str, replica: str = "", type: str = "Normal") -> None:
        self._run(
            "INSERT INTO events (job, time, type, replica, reason, message) VALUES (?, ?, ?, ?, ?, ?)",
            (job, time.time(), type, replica, reason, message),
        )

    def events(self, job: str, after: int = 0, limit: int | None = None) -> list[dict]:
        """Events with id > after, oldest first; with `limit`, only the most recent ones."""
        rows = self._run(
            "SELECT * FROM (SELECT * FROM events WHERE job=? AND id>? ORDER BY id DESC LIMIT ?) ORDER BY id",
            (job, after, -1 if limit is None else limit),
        )
        return [dict(r) for r in rows]


class RunStore:
    """One run's hold on the store, its supervisor's: what it writes of the job, its replicas and events lands only
    while the job is still on that run. A supervisor a stop gave up on, still running when the job was restarted,
    writes nothing over the next run's."""

    ON_RUN = "EXISTS (SELECT 1 FROM jobs WHERE name=? AND run=?)"

    def __init__(self, store: Store, run: int):
        self.store, self.run = store, run

    def transaction(self) -> AbstractContextManager[None]:
        return self.store.transaction()

    def update_job(self, name: str, **fields: Any) -> None:
        self.store._update("jobs", "name=? AND run=?", (name, self.run), fields)

    def update_replica(self, job: str, replica: str, **fields: Any) -> None:
        self.store._update("replicas", f"job=? AND name=? AND {self.ON_RUN}", (job, replica, job, self.run), fields)

    def add_event(self, job: str, reason: str, message: str, replica: str = "", type: str = "Normal") -> None:
        self.store._run(f"INSERT INTO events (job, time, type, replica, reason, message) SELECT ?, ?, ?, ?, ?, ? "
                        f"WHERE {self.ON_RUN}", (job, time.time(), type, replica, reason, message, job, self.run))


class StoreLedger:
    """contract.Ledger in the job database: every owner's runs, as usage.ledger_row made them."""

    def __init__(self, store: Store):
        self.store = store

    def add(self, row: dict) -> None:
        self.store._run("INSERT OR REPLACE INTO ledger VALUES (?, ?, ?)",
                        (row_key(row), row["finished"], json.dumps(row)))

    def since(self, moment: float) -> list[dict]:
        return [json.loads(found["row"]) for found in
                self.store._run("SELECT row FROM ledger WHERE finished IS NULL OR finished >= ?", (moment,))]
