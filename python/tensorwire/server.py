"""Runs a tensorwire server: `python3 -m tensorwire.server [flags]`.

The flags are tensorwire-server's (`python3 -m tensorwire.server --help`, docs/remote.md): this
module replaces itself with the tensorwire-server program that the installed package carries
(tensorwire/bin/), so the server, its output ("listening on <url>", then its limits) and its
graceful stop on SIGINT/SIGTERM are exactly the program's. Outside an installed package (the
build tree's python/), it runs $TW_SERVER_BINARY, else tensorwire-server from PATH.
"""
import os
import shutil
import sys


def binary():
    """The tensorwire-server this module runs, or None."""
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tensorwire-server")
    if os.access(bundled, os.X_OK):
        return bundled
    return os.environ.get("TW_SERVER_BINARY") or shutil.which("tensorwire-server")


def main(argv=None):
    path = binary()
    if path is None:
        sys.exit("tensorwire.server: no tensorwire-server in this package, $TW_SERVER_BINARY or "
                 "PATH (install the package with pip, or build the project)")
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    os.execv(path, [path, *args])


if __name__ == "__main__":
    main()
