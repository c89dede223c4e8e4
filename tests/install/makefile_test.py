#!/usr/bin/env python3
"""What the Makefile's entry points do, read from `make -n` (issue 50): `make install` with a build
present installs no packages (it needs no root and no apt), and `make run` builds the programs
it runs, not every target, then runs the digits example and a short run of the language model.

  makefile_test.py SOURCE_DIR BUILD_DIR
"""
import subprocess
import sys


def dry_run(source, build, target):
    return subprocess.run(["make", "-n", "-C", source, f"BUILD={build}", target], check=True,
                          capture_output=True, text=True).stdout


def main():
    source, build = sys.argv[1], sys.argv[2]
    failures = []
    install = dry_run(source, build, "install")
    if "bootstrap.sh" in install or "apt-get" in install:
        failures.append(f"make install (with {build} present) would install packages:\n{install}")
    if "cmake --install" not in install:
        failures.append(f"make install does not install:\n{install}")
    run = dry_run(source, build, "run")
    build_lines = [l for l in run.splitlines() if "cmake --build" in l]
    if not build_lines or any("--target" not in l for l in build_lines):
        failures.append(f"make run builds more than its programs:\n{run}")
    for program in ("apps/train_digits", "apps/train_lm"):
        if program not in run:
            failures.append(f"make run does not run {program}:\n{run}")
    for f in failures:
        print("FAILED:", f, file=sys.stderr)
    if failures:
        sys.exit(1)
    targets = build_lines[0].split("--target")[1].split("&&")[0].strip()
    print("make install needs no packages; make run builds", targets)


if __name__ == "__main__":
    main()
