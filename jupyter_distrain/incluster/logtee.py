"""The program a Kubernetes replica's container runs its command under (`python /opt/distrain/logtee LOG
TERMINATION_LOG COMMAND...`; LOG's ${VARIABLES} are expanded, so replicas sharing one template name their files by
${DISTRAIN_INDEX}): every line the command prints is stamped with the time
(UTC, microseconds, strictly increasing) and whether it came through stdout or stderr (the log files' format) and
written both to the container's output, which pods/log serves, and to LOG on the job's output volume, so the lines
outlive the pod. Both copies carry the same stamp, so a reader merges them with neither loss nor duplicates. Signals
are passed on to every process of the command; its exit code is this program's (128 + N when signal N ended it), as a
shell would report it. As the command ends, what it used (its processes' CPU seconds and largest resident set, as
the kernel counted them for the processes waited for) and, when it failed, its last lines of stderr become the
container's termination message (TERMINATION_LOG, unless the command wrote one itself), which the pod's status
keeps after the pod's end. The files the command wrote next to its code, and the directories where it wrote
TensorBoard event files in the temporary directory, which go with the pod, are named in last lines; a line of the
container's output alone says that its log ends.
Standard library only: it runs in the job's image, not where this package is installed."""

import json
import os
import re
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque

MAX_LINE = 64 * 1024  # longer lines are split (the server's log files' too)
REDRAW_SECONDS = 1.0  # a line being redrawn in place is written as it stands at most this often
REDRAWS_ABOVE = re.compile(rb"(?:\x1b\[[0-9;]*K)*\x1b\[[0-9]*A")  # a drawing that begins by moving up (Rich's bars)
MAX_MESSAGE = 4096  # bytes of a termination message the kubelet keeps
USED = b"distrain used "  # a termination message's first line: what the command used, as JSON (state.used_by)
USED_ROOM = 128  # bytes of a termination message kept for that line
MAX_LOOKED_AT = 100_000  # files of the temporary directory looked at for event files, at most
END = b". the log ends here"  # after a stamp, the container output's last line (loglines.ends_log)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


class Stamper:
    def __init__(self, path):
        self.last = 0
        self.out = sys.stdout.buffer
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.archive = open(path, "ab", buffering=0)
        except OSError as e:
            self.archive = None
            self.write([f"distrain: no copy of this log on the output volume: {e}".encode()])

    def stamp(self):
        micros = max(time.time_ns() // 1000, self.last + 1)
        self.last = micros
        seconds, fraction = divmod(micros, 10**6)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)).encode() + b".%06dZ" % fraction

    def end(self):
        """Say, in the container's output alone, that its log ends here: a reader of pods/log that reached this line
        has every line, and need not read the volume's copy."""
        self.out.write(self.stamp() + END + b"\n")
        self.out.flush()

    def write(self, lines, separator=b" "):
        """Write `lines` of the command's stdout (`separator` b" ") or stderr (b"!")."""
        data = b"".join(self.stamp() + separator + line + b"\n" for line in lines)
        self.out.write(data)
        self.out.flush()
        if self.archive:
            try:
                self.archive.write(data)
            except OSError as e:
                self.archive = None
                self.write([f"distrain: the copy of this log on the output volume stops here: {e}".encode()])


def last_drawn(line):
    """What a terminal shows of a line its program redrew in place (carriage returns, backspaces): its last
    drawing that is not empty."""
    drawings = line.split(b"\r")
    return next((d.rstrip(b"\x08") for d in reversed(drawings) if d.rstrip(b"\x08")), b"")


class TerminalLines:
    """A program's output cut into lines as a terminal shows them (this program's, and the server's log writer's
    for local replicas): each line as last drawn, at most MAX_LINE bytes. A line redrawn in place (a progress bar) is
    taken as it stands at most every REDRAW_SECONDS, and so is the latest of the lines drawn over lines taken
    before (a drawing that first moves up: Rich's, drawing two bars at once), not each."""

    def __init__(self):
        self.partial = b""  # a line begun; b"\r" + its last drawing while it is redrawn
        self.held = None  # the latest line drawn over lines taken, not taken yet
        self.drawn = 0.0  # when (time.monotonic) a redrawn line was last taken

    def take(self, data):
        """The lines `data` completes, or that are due."""
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        if b"\r" in data or self.held:
            lines = self.redrawn([last_drawn(line) for line in lines if line != b"\r"])
        while len(self.partial) > MAX_LINE:
            lines.append(self.partial[:MAX_LINE])
            self.partial = self.partial[MAX_LINE:]
        return [line[i:i + MAX_LINE] for line in lines for i in range(0, len(line) or 1, MAX_LINE)]

    def redrawn(self, lines):
        taken = []
        for line in lines:
            if REDRAWS_ABOVE.match(line):
                self.held = line
            else:
                taken += [self.held, line] if self.held else [line]
                self.held = None
        if b"\r" in self.partial:
            self.partial = b"\r" + last_drawn(self.partial)
        due = [line for line in (self.held, self.partial[1:] if self.partial[:1] == b"\r" else b"") if line]
        if due and time.monotonic() - self.drawn >= REDRAW_SECONDS:
            taken += due
            self.held, self.drawn = None, time.monotonic()
            if self.partial[:1] == b"\r":
                self.partial = b"\r"
        return taken

    def end(self):
        """The lines left at the output's end."""
        left = [line for line in (self.held, last_drawn(self.partial)) if line]
        self.held, self.partial = None, b""
        return [line[i:i + MAX_LINE] for line in left for i in range(0, len(line), MAX_LINE)]


class Output:
    """One of the command's outputs, read in chunks and written a line at a time; stderr's last lines are kept."""

    def __init__(self, pipe, separator):
        self.pipe = pipe
        self.separator = separator
        self.lines = TerminalLines()
        self.last = deque()  # stderr's last lines, at most MAX_MESSAGE - USED_ROOM bytes in all
        self.kept = 0

    def read(self, stamper):
        """Write the lines of what the pipe has now, or the last partial line at its end; False at its end."""
        chunk = os.read(self.pipe.fileno(), 64 * 1024)
        self.write(stamper, self.lines.take(chunk) if chunk else self.lines.end())
        return bool(chunk)

    def write(self, stamper, lines):
        stamper.write(lines, self.separator)
        if self.separator == b"!":
            for line in lines:
                self.last.append(line)
                self.kept += len(line) + 1
                while self.kept > MAX_MESSAGE - USED_ROOM and len(self.last) > 1:
                    self.kept -= len(self.last.popleft()) + 1


def terminated(path, used, lines):
    """Make what the command used, then its last lines of stderr (`lines`, those of a failed command), the
    container's termination message (the file the kubelet made), unless it wrote one itself."""
    try:
        with open(path, "r+b") as message:
            if not message.seek(0, os.SEEK_END):
                message.write(b"\n".join([used, *lines])[:MAX_MESSAGE])  # past it, one last line's beginning
    except OSError:  # no termination log: the pod's status says less
        pass


def used_line(usage, inherited):
    """What the command used, from the kernel's account of its ended processes (`usage`, wait4's): CPU seconds, and
    the largest resident set in bytes, unknown (null) when no larger than this program's at the command's start,
    which its first process inherited as its own (the kernel keeps the mark across the exec)."""
    largest = usage.ru_maxrss * 1024
    return USED + json.dumps({"cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
                              "peak_memory": largest if largest > inherited else None}).encode()


def file_clock():
    """Now, as the kernel stamps the files written now: on Linux its coarse clock, up to a tick behind time.time(), so
    a file written at once is not older than the command."""
    try:
        return time.clock_gettime(5)  # CLOCK_REALTIME_COARSE, which the time module does not name
    except OSError:
        return time.time()


def written_since(since):
    """The files the command wrote in its working directory (the job's working copy) since `since`: paths and sizes,
    largest first. Not its hidden entries (.git; HOME's, where the working copy is HOME) nor Python's caches."""
    written = []
    for directory, subdirectories, names in os.walk("."):
        top = directory == "."
        subdirectories[:] = [d for d in subdirectories if d != "__pycache__" and not (top and d.startswith("."))]
        for name in names if not top else [n for n in names if not n.startswith(".")]:
            path = os.path.join(directory, name)
            try:
                status = os.lstat(path)
            except OSError:
                continue
            if status.st_mtime >= since:
                written.append((os.path.normpath(path), status.st_size))
    return sorted(written, key=lambda file: (-file[1], file[0]))


def discarded(written):
    """The line the log ends with when the command wrote next to its code: those files go with the pod."""
    shown = ", ".join(f"{path} ({size:,} bytes)" for path, size in written[:5])
    more = f" and {len(written) - 5} more" if len(written) > 5 else ""
    return (f"distrain: {len(written)} file{'s' * (len(written) > 1)} written next to the code, discarded with "
            f"the pod: {shown}{more}; write what you keep under $DISTRAIN_OUTPUT_DIR").encode()


def event_files_outside(since):
    """The directories of the temporary directory ($TMPDIR, else /tmp) where the command wrote TensorBoard event files
    since `since`, but for the job's output's: the job's TensorBoard and metrics read its output alone."""
    kept = [os.path.realpath(os.environ[name]) for name in ("DISTRAIN_OUTPUT_DIR", "DISTRAIN_LOG_DIR")
            if os.environ.get(name)]
    found, looked = [], 0
    for directory, _, names in os.walk(tempfile.gettempdir()):
        looked += len(names)
        if looked > MAX_LOOKED_AT:
            break
        real = os.path.realpath(directory)
        if any(real == root or real.startswith(root + os.sep) for root in kept):
            continue
        for name in names:
            try:
                if ".tfevents." in name and os.lstat(os.path.join(directory, name)).st_mtime >= since:
                    found.append(directory)
                    break
            except OSError:  # gone meanwhile
                continue
    return sorted(found)


def outside(directories):
    """The line the log ends with when the command wrote event files where its job's TensorBoard does not look."""
    more = f" and {len(directories) - 3} more" if len(directories) > 3 else ""
    return (f"distrain: TensorBoard event files written outside the job's output directory, where its TensorBoard "
            f"and metrics do not look, discarded with the pod: in {', '.join(directories[:3])}{more}; write them "
            "under $DISTRAIN_LOG_DIR").encode()


def forward(child, signum):
    try:
        os.killpg(child.pid, signum)
    except ProcessLookupError:  # the command ended meanwhile
        pass


def main():
    stamper = Stamper(os.path.expandvars(sys.argv[1]))
    started = file_clock()
    inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # the command's processes in a group of their own, each told of a signal (the shell running the command
    # may not pass it on): a stopped pod's training ends at once, not when the kubelet's grace runs out
    child = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    for signum in FORWARDED:
        signal.signal(signum, lambda number, frame: forward(child, number))
    stderr = Output(child.stderr, b"!")
    selector = selectors.DefaultSelector()
    for output in (Output(child.stdout, b" "), stderr):
        selector.register(output.pipe, selectors.EVENT_READ, output)
    while selector.get_map():
        for key, _ in selector.select():
            if not key.data.read(stamper):
                selector.unregister(key.fileobj)
    _, status, usage = os.wait4(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    terminated(sys.argv[2], used_line(usage, inherited), stderr.last if code else [])
    written = written_since(started)
    if written:
        stamper.write([discarded(written)], b"!")
    boards = event_files_outside(started)
    if boards:
        stamper.write([outside(boards)], b"!")
    stamper.end()
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
