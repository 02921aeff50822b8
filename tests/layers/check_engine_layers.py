#!/usr/bin/env python3
"""The engine's layers point one way (engine/CMakeLists.txt).

Each layer's files compile against an include directory holding only its own folder and those of
the layers below it that it uses. This checks that promise against the build itself:
  - every header of every layer compiles on its own with only its layer's directory (so a header
    that climbs fails here even when no file of its layer includes it yet);
  - in every layer, an include of each layer it may not use fails for want of the file (GCC's "No such
    file or directory", clang's "file not found"; so the check itself cannot quietly pass, say if the
    whole source tree came onto the path);
  - what a layer's object files call (nm's undefined symbols) is defined in that layer or in one it
    may use: a function declared low and defined high (Tensor's op methods are declared in core and
    defined in ops) compiles anywhere, but a call to it from below would link upwards.
The CUDA module's files (engine/kernels/cuda/, *.cu) are above every layer and are not checked.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile


# What GCC and clang say of an #include whose file is not on the include path.
MISSING_FILE = ("No such file or directory", "file not found")

def compile_probe(compiler, defines, include_root, header, workdir, generated=()):
    """Compiles a file that includes only `header` (engine/<layer>/<name>.h); returns (ok, output)."""
    fd, probe = tempfile.mkstemp(suffix=".cpp", dir=workdir)
    with os.fdopen(fd, "w") as f:
        f.write('#include "%s"\n' % header)
    try:
        r = subprocess.run([compiler, "-std=c++20", "-fsyntax-only"] + ["-D" + d for d in defines] + ["-I", include_root] + [a for g in generated for a in ("-I", g)] + [probe],
                           capture_output=True, text=True)
        return r.returncode == 0, r.stderr
    finally:
        os.unlink(probe)


def symbols(objects, *nm_args):
    out = subprocess.run(["nm", "-C"] + list(nm_args) + objects, check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def check_links(layers_dir, layers, visible):
    """Each layer's undefined gpulab symbols must be defined in a layer it may use."""
    defined_in = {}  # symbol -> layers whose objects define it
    undefined = {}
    for layer in layers:
        listing = os.path.join(layers_dir, layer + ".objects")
        if not os.path.exists(listing):
            return ["%s: %s is missing (engine/CMakeLists.txt writes it)" % (layer, listing)]
        with open(listing) as f:
            objects = [line.strip() for line in f if line.strip()]
        for line in symbols(objects, "--defined-only"):
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in "TWVBDRu" and "gpulab::" in parts[2]:
                defined_in.setdefault(parts[2], set()).add(layer)
        undefined[layer] = {line.split(" U ", 1)[1] for line in symbols(objects, "--undefined-only")
                            if " U " in line and "gpulab::" in line}
    failures = []
    for layer in layers:
        for sym in sorted(undefined[layer]):
            where = defined_in.get(sym, set())
            if where and not (where & visible[layer]):
                failures.append("%s calls %s, defined in %s, a layer it may not use" % (layer, sym, ", ".join(sorted(where))))
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--layers", required=True, help="the build's engine/engine-layers directory")
    ap.add_argument("--engine", required=True, help="the source tree's engine/ directory")
    ap.add_argument("--define", action="append", default=[], help="a definition the engine is built with")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--generated", action="append", default=[],
                    help="a directory of generated headers every layer's files may include (the ops of native_ops.toml)")
    args = ap.parse_args()

    layers = sorted(d for d in os.listdir(args.layers) if os.path.isdir(os.path.join(args.layers, d)))
    if len(layers) < 2:
        sys.exit("no engine layers under %s: was the engine configured with its layers?" % args.layers)
    visible = {l: set(os.listdir(os.path.join(args.layers, l, "engine"))) for l in layers}

    def headers_of(layer):
        out = []
        for dirpath, dirnames, filenames in os.walk(os.path.join(args.engine, layer)):
            dirnames[:] = [d for d in dirnames if d != "cuda"]  # the CUDA module's
            for name in sorted(filenames):
                if name.endswith(".h"):
                    rel = os.path.relpath(os.path.join(dirpath, name), args.engine)
                    out.append("engine/" + rel.replace(os.sep, "/"))
        return out

    jobs = []  # (layer, header, must compile)
    for layer in layers:
        for header in headers_of(layer):
            jobs.append((layer, header, True))
        for other in layers:
            if other not in visible[layer]:
                first = headers_of(other)
                if first:
                    jobs.append((layer, first[0], False))

    failures = []
    with tempfile.TemporaryDirectory() as workdir, concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(lambda j: (j, compile_probe(args.compiler, args.define, os.path.join(args.layers, j[0]), j[1], workdir, args.generated)), jobs)
        for (layer, header, must_compile), (ok, output) in results:
            if must_compile and not ok:
                failures.append("%s: %s does not compile with only the layers below it:\n%s" % (layer, header, output.strip()))
            elif not must_compile and ok:
                failures.append("%s: an include of %s compiled, but %s may not use that layer" % (layer, header, layer))
            elif not must_compile and not any(words in output for words in MISSING_FILE):
                failures.append("%s: an include of %s failed, but not for want of the file:\n%s" % (layer, header, output.strip()))
    failures += check_links(args.layers, layers, visible)
    checked = sum(1 for j in jobs if j[2])
    refused = len(jobs) - checked
    print("%d layers; %d headers compiled with their own layer's includes; %d climbing includes refused"
          % (len(layers), checked, refused))
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
