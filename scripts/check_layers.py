#!/usr/bin/python3
"""Fails on an #include that points up a layer (docs/architecture.md, "Layers").

Every source under src/<layer>/ and every public header under include/tensorwire/ belongs to one
layer; a file may include its own layer's headers and those of the layers below it, never one
above it nor a sibling (serve/ and onnx/ are siblings: neither includes the other). A backend's
own folder (src/backend/<name>/) sits above src/backend/ itself: the executor interface and the
registry never include a backend's headers (a backend registers itself). Programs, tests,
benchmarks and the Python module sit on top and may include anything.

It also fails on a getenv("TW_...") in src/ outside core/env.cc: the library's environment
variables are declared once there (core/env.h), but in a backend's own folder (src/backend/<name>/),
whose variables its own docs list.

Usage: scripts/check_layers.py [ROOT]   (exit 1 and one line per violation when any)
"""
import pathlib
import re
import sys

# Bottom to top: a layer may include the ones before it (docs/architecture.md keeps this order).
LAYERS = ["core", "ir", "backend", "backend/*", "protocol", "net", "server", "client", "api",
          "serve|onnx"]
RANK = {}
for rank, names in enumerate(LAYERS):
    for name in names.split("|"):
        RANK[name] = rank

# Public headers belong to the layer that implements them.
PUBLIC = {
    "export.h": "core", "dtype.h": "core", "error.h": "core", "op_kinds.h": "core",
    "device_kind.h": "core", "server.h": "server", "profile.h": "client", "onnx.h": "onnx",
}
PUBLIC_DEFAULT = "api"  # tensor.h, device.h, nn.h, ... : what the api/ layer implements

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
GETENV = re.compile(r'getenv\(\s*"TW_')


def layer_of_src(rel):
    """The layer of a path under src/ ("backend/cpu/x.h" -> "backend/*")."""
    parts = rel.split("/")
    if parts[0] == "backend" and len(parts) > 2:
        return "backend/*"
    return parts[0]


def layer_of_include(target):
    if target.startswith("tensorwire/"):
        return PUBLIC.get(target[len("tensorwire/"):], PUBLIC_DEFAULT)
    if "/" not in target:
        return None  # a file beside the includer (same folder, same layer)
    return layer_of_src(target)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    files = [(p, layer_of_src(str(p.relative_to(root / "src"))))
             for p in sorted((root / "src").rglob("*")) if p.suffix in (".h", ".cc", ".cu")]
    files += [(p, PUBLIC.get(p.name, PUBLIC_DEFAULT))
              for p in sorted((root / "include" / "tensorwire").glob("*.h"))]
    bad = []
    for path, layer in files:
        if layer not in RANK:
            bad.append(f"{path.relative_to(root)}: folder not in the layer list of "
                       f"scripts/check_layers.py (add it where it belongs)")
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        rel = str(path.relative_to(root))
        if layer != "backend/*" and rel != "src/core/env.cc":
            for m in GETENV.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{rel}:{line}: reads a TW_ variable with getenv; declare it in "
                           f"src/core/env.h (TW_ENV_LIST) and read it with env_number/env_text")
        for m in INCLUDE.finditer(text):
            target = m.group(1)
            dep = layer_of_include(target)
            if dep is None or dep == layer or dep not in RANK:
                continue
            if RANK[dep] >= RANK[layer]:
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{path.relative_to(root)}:{line}: layer '{layer}' includes "
                           f"\"{target}\" of layer '{dep}', which is not below it")
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} problem(s): includes that point up a layer "
              f"(docs/architecture.md) or undeclared environment variables")
        return 1
    print(f"check_layers: {len(files)} files, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
