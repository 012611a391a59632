"""The stamp every reference writer leaves beside what it wrote: the sha256 of what that output
was computed from (the writer scripts, their inputs). A second build's ctest over the same
testdata (the sanitizers') finds the stamp matching and runs no torch; a changed script or input
changes the stamp and the output is written again."""
import hashlib


def digest(paths=(), extra=b""):
    """sha256 (hex) of the files at paths, in order, then the bytes extra."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(extra)
    return h.hexdigest()


def matches(stamp_path, stamp):
    """True when stamp_path exists and holds stamp."""
    try:
        with open(stamp_path) as f:
            return f.read().strip() == stamp
    except FileNotFoundError:
        return False


def write(stamp_path, stamp):
    """Writes stamp to stamp_path: call it once the output is complete."""
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
