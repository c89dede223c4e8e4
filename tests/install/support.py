"""What the install tests share: running commands, a server process's address, the exit status."""
import signal
import subprocess
import sys
import tempfile
import time

START_LIMIT_S = 120  # a server's time to print its limits line (as tests/support/server_process.h)


def run(cmd, **kw):
    """Runs cmd and returns its output; on failure raises AssertionError with that output."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}")
    return r.stdout


class Server:
    """A server process started by cmd (which must listen on port 0): .url is the first address
    it prints ("listening on <url>", up to its "limits:" line), as server_process.h reads it."""

    def __init__(self, cmd, **kw):
        self.what = " ".join(cmd[:3])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **kw)
        self.url = None
        deadline = time.monotonic() + START_LIMIT_S
        for line in self.proc.stdout:
            if line.startswith("listening on "):
                self.url = self.url or line[len("listening on "):].strip()
            elif line.startswith("limits:"):
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"{self.what} did not listen within {START_LIMIT_S} s")
        if self.url is None:
            raise AssertionError(f"{self.what} exited before listening ({self.proc.wait()})")

    def stop(self):
        """SIGTERM, the graceful stop; the server must exit with status 0."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        if code != 0:
            raise AssertionError(f"{self.what} exited with {code} on SIGTERM")


def main(test, name):
    """Runs test(tmp) with a temporary directory, removed after; an AssertionError fails it with
    its message (exit status 1)."""
    try:
        with tempfile.TemporaryDirectory(prefix="tw-install-") as tmp:
            test(tmp)
        print(f"{name} passed")
    except AssertionError as e:
        print(f"{name} FAILED: {e}", file=sys.stderr)
        sys.exit(1)
