"""The program a Kubernetes job's TensorBoard pod runs (`python /opt/distrain/tensorboard --logdir ... --distrain_output
...`): TensorBoard, showing every event file under the job's output directory (View), answering only requests that
carry the job's board secret (its Secret, in the pod's environment), so another pod of the namespace reaches the
port and reads nothing; the Jupyter server, which reads the Secret, adds it on its way through the API server's
service proxy. Readiness is asked at PROBE_PATH, which tells nothing. That proxy rewrites links in HTML and fails on
a Content-Encoding it does not know; TensorBoard marks its pages `identity`, so that header goes. Standard library
and TensorBoard only: it runs in the job's image, not where this package is installed. The local board
(server/board.py) imports its guard; the server's local board and scalars.py, its View."""

import atexit
import hmac
import os
import shutil
import sys
import tempfile
import threading
import time

SECRET_HEADER, SECRET_VARIABLE = "X-Distrain-Board-Secret", "DISTRAIN_BOARD_SECRET"
SECRET_ENVIRON = "HTTP_" + SECRET_HEADER.upper().replace("-", "_")  # the header, as WSGI names it
PROBE_PATH = "/distrain-ready"


def requiring_secret(secret, wsgi_app):
    """`wsgi_app`, answering a request without `secret` (in SECRET_HEADER) with a 403."""
    def guarded(environ, start_response):
        if not hmac.compare_digest(environ.get(SECRET_ENVIRON, "").encode(), secret.encode()):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"this TensorBoard answers its Jupyter server only\n"]
        return wsgi_app(environ, start_response)

    return guarded


def answering_probes(wsgi_app):
    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") == PROBE_PATH:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ready\n"]
        return wsgi_app(environ, start_response)

    return wrapped


def plain_pages(wsgi_app):
    def wrapped(environ, start_response):
        def start(status, headers, exc_info=None):
            kept = [(k, v) for k, v in headers if (k.lower(), v) != ("content-encoding", "identity")]
            return start_response(status, kept, exc_info)

        return wsgi_app(environ, start)

    return wrapped


# What a job's board shows: every event file under the job's output directory, each directory of them a run named
# by its path there, but for the directory the replicas write in (the spec's tensorboard.logdir), whose contents are
# shown at the top (worker-0, not training_logs/worker-0): the replicas' runs keep their short names, and code that
# writes its event files elsewhere (Keras' callback in my_working_dir/log) is seen too. A name in both places is one
# run (one directory of the view) holding both. TensorBoard names runs by their paths in its --logdir, so a board's
# --logdir is a view: a directory of its own per directory (one merged from several: the top, those on the way to the
# logdir), and a link to every event file; sync() keeps it current. TensorBoard walks only that: a job's own links,
# which may lead to another owner's files or around the tree again and again, are neither followed nor shown, and a
# sync walks at most MAX_WALKED directories. Nothing but names is read: no file's contents.

HIDDEN = (".distrain",)  # at the top of a job's output: the job's own logs (Kubernetes), never event files
SYNC_SECONDS = 2  # how often a board's view takes in new directories
MAX_WALKED = 16384  # the most directories one read of a job's files walks (a view's sync, scalars.py, progress.py)


def is_event_file(name):
    return "tfevents" in name  # as TensorBoard tells them


def logdir_parts(logdir):
    """The spec's tensorboard.logdir as path parts: "." and "" are none, "a//b/" is ("a", "b")."""
    return tuple(part for part in logdir.split("/") if part not in ("", "."))


def job_sources(output, logdir):
    """The directories merged into the top of a job's view, each with the paths below it not shown there: the
    logdir first (its event files win a name both have), then the output without the logdir and HIDDEN."""
    parts = logdir_parts(logdir)
    hidden = frozenset([(name,) for name in HIDDEN] + ([parts] if parts else []))
    inside = [(os.path.join(output, *parts), frozenset())] if parts else []
    return tuple(inside + [(output, hidden)])


def listing(sources):
    """One directory of a view, from the directories merged into it: (merged, directories, files), the names
    shown as several directories merged (or one with something hidden below it), with those directories' sources;
    the directories shown as they are; the event files; each directory and file by its path."""
    found, files = {}, {}
    for directory, hidden in sources:
        try:
            entries = list(os.scandir(directory))
        except OSError:  # not there (yet), or not a directory
            continue
        for entry in entries:
            below = frozenset(path[1:] for path in hidden if path[0] == entry.name)
            if () in below:
                continue
            try:  # not a link: it may lead to another owner's files
                if entry.is_dir(follow_symlinks=False):
                    found.setdefault(entry.name, []).append((entry.path, below))
                elif is_event_file(entry.name) and entry.is_file(follow_symlinks=False):
                    files.setdefault(entry.name, entry.path)
            except OSError:
                continue
    merged = {name: tuple(dirs) for name, dirs in found.items() if len(dirs) > 1 or dirs[0][1]}
    directories = {name: dirs[0][0] for name, dirs in found.items() if name not in merged}
    return merged, directories, {name: path for name, path in files.items() if name not in found}


class View:
    """What the board of a job shows, the job writing in `output` with the spec's tensorboard.logdir `logdir`; of
    a sweep (`trials`), each trial's as `<trial>/...`, its trials found by the links in its `output`/`logdir`
    (sweep.py's Controller makes one per trial, to the trial's logdir: the trial's output is above it)."""

    def __init__(self, output, logdir, trials=False):
        self.output, self.logdir, self.trials = str(output), logdir, trials

    def top(self):
        """The view's top directory, as listing() answers it."""
        if not self.trials:
            return listing(job_sources(self.output, self.logdir))
        links, depth = os.path.join(self.output, *logdir_parts(self.logdir)), len(logdir_parts(self.logdir))
        try:
            entries = list(os.scandir(links))
        except OSError:
            entries = []
        merged = {}
        for entry in entries:
            if entry.is_symlink():  # where it leads, as the path says: a relative link resolves where it is
                trial = os.path.normpath(os.path.join(links, os.readlink(entry.path)))
                merged[entry.name] = job_sources(trial.rsplit(os.sep, depth)[0] if depth else trial, self.logdir)
        return merged, {}, {}

    def sync(self, directory):
        """Make `directory` show the view: what it shows now is added, what it no longer shows removed."""
        os.makedirs(directory, exist_ok=True)
        sync_directory(directory, *self.top())


def sync_directory(directory, merged, directories, files, budget=None):
    """Make `directory` show one directory of a view, as listing() answers it: a directory of its own for each
    directory there, shown likewise (MAX_WALKED in all, counted down in `budget`), a link to each event file; what
    it no longer shows removed."""
    budget = [MAX_WALKED] if budget is None else budget
    below = {**merged, **{name: ((path, frozenset()),) for name, path in directories.items()}}
    for entry in list(os.scandir(directory)):
        if entry.is_symlink():
            if os.readlink(entry.path) != files.get(entry.name):
                os.unlink(entry.path)
        elif entry.name not in below:
            shutil.rmtree(entry.path, ignore_errors=True)
    for name, target in files.items():
        path = os.path.join(directory, name)
        if not os.path.islink(path):
            try:
                os.symlink(target, path)
            except FileExistsError:  # made meanwhile
                pass
    for name, sources in below.items():
        if budget[0] <= 0:
            return
        budget[0] -= 1
        path = os.path.join(directory, name)
        os.makedirs(path, exist_ok=True)
        sync_directory(path, *listing(sources), budget)


def keep_synced(view, directory, seconds=SYNC_SECONDS):
    """Sync `directory` with `view` now, then every `seconds` on a thread of its own."""
    view.sync(directory)

    def loop():
        while True:
            time.sleep(seconds)
            try:
                view.sync(directory)
            except OSError as e:  # e.g. the volume gone for a moment: again at the next round
                print(f"the board's view of the event files: {e}", file=sys.stderr, flush=True)

    threading.Thread(target=loop, daemon=True, name="view").start()


def board_arguments(argv):
    """TensorBoard's arguments, from the pod's: `--logdir <output>/<logdir> --distrain_output <output>
    [--distrain_trials]` become `--logdir <a view of the output, kept current>` (View)."""
    argv, output, trials = list(argv), None, False
    if "--distrain_trials" in argv:
        argv.remove("--distrain_trials")
        trials = True
    if "--distrain_output" in argv:
        at = argv.index("--distrain_output")
        output = argv[at + 1]
        del argv[at:at + 2]
    if output is not None and "--logdir" in argv:
        at = argv.index("--logdir") + 1
        view, argv[at] = View(output, os.path.relpath(argv[at], output), trials), tempfile.mkdtemp(prefix="view.")
        atexit.register(shutil.rmtree, argv[at], True)  # TensorBoard exits on SIGTERM too
        keep_synced(view, argv[at])
    return argv


def main():
    from tensorboard import program

    class Server(program.WerkzeugServer):
        def __init__(self, wsgi_app, flags):
            guarded = requiring_secret(os.environ[SECRET_VARIABLE], plain_pages(wsgi_app))
            super().__init__(answering_probes(guarded), flags)

    board = program.TensorBoard(server_class=Server)
    board.configure(board_arguments(sys.argv))
    sys.exit(board.main())


if __name__ == "__main__":
    main()
