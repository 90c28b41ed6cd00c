"""The program a Kubernetes replica's container runs its command under
(`python -c <this file> LOG COMMAND...`): every line the command prints, stdout and stderr, is stamped
with the time (UTC, microseconds, strictly increasing) and written both to the container's output, which
pods/log serves, and to LOG on the job's output volume, so the lines outlive the pod. Both copies carry
the same stamp, so a reader merges them with neither loss nor duplicates. Signals are passed on to every
process of the command; its exit code is this program's (128 + N when signal N ended it), as a shell would report it.
Standard library only: it runs in the job's image, not where this package is installed."""

import os
import signal
import subprocess
import sys
import time

MAX_LINE = 64 * 1024  # longer lines are split, as the server's log files split them
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

    def write(self, lines):
        data = b"".join(self.stamp() + b" " + line.rstrip(b"\r") + b"\n" for line in lines)
        self.out.write(data)
        self.out.flush()
        if self.archive:
            try:
                self.archive.write(data)
            except OSError as e:
                self.archive = None
                self.write([f"distrain: the copy of this log on the output volume stops here: {e}".encode()])


def forward(child, signum):
    try:
        os.killpg(child.pid, signum)
    except ProcessLookupError:  # the command ended meanwhile
        pass


def main():
    stamper = Stamper(sys.argv[1])
    # the command's processes in a group of their own, each told of a signal (the shell running the command
    # may not pass it on): a stopped pod's training ends at once, not when the kubelet's grace runs out
    child = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    for signum in FORWARDED:
        signal.signal(signum, lambda number, frame: forward(child, number))
    partial = b""
    while True:
        chunk = os.read(child.stdout.fileno(), 64 * 1024)
        if not chunk:
            break
        *lines, partial = (partial + chunk).split(b"\n")
        while len(partial) > MAX_LINE:
            lines.append(partial[:MAX_LINE])
            partial = partial[MAX_LINE:]
        stamper.write([line[i:i + MAX_LINE] for line in lines for i in range(0, len(line) or 1, MAX_LINE)])
    if partial:
        stamper.write([partial])
    code = child.wait()
    sys.exit(128 - code if code < 0 else code)


main()
