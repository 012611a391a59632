#!/usr/bin/env python3
"""test_server_device: the CUDA backend opened only when a GPU is asked for (issue 34 item 6),
in a CUDA build, on the project's default model.

Checked, with what the system itself reports (readelf's dynamic section, the kernel's
/proc/PID/maps, glibc's LD_DEBUG=files), never with our own words:
- no program links the CUDA runtime, cuBLAS or NCCL (readelf -d: no NEEDED entry): only
  libkgcuda.so (and libkgnccl.so) do, beside the programs; libkgcuda.so exports one symbol;
  libkgnccl.so opens (ctypes) and its door answers;
- kogpt2d --device cpu, and --device auto on a machine without a GPU, serve without libcudart,
  libcublas or libkgcuda.so mapped (their idle RSS is printed); on a GPU machine auto picks the
  GPU and maps them;
- kogpt2d --device cuda without a GPU exits 1 with "cuda backend: no GPU found (...)";
- a copy of kogpt2d with no libkgcuda.so beside it, with a file that is not a library in its
  place, a library that has no door, or a door of another build (another ABI number, an op
  missing: tests/cuda_door_stub.c): --device cuda names the file and the dynamic linker's or
  the loader's reason; --device auto still serves on the CPU (on a machine without a GPU);
- kogpt2 next and kogpt2-train eval with --device auto load none of them (LD_DEBUG=files) on a
  machine without a GPU.
Exits 77 in a build without CUDA (no libkgcuda.so)."""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile

import test_server_lib as lib
from test_server_lib import check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "default")
HEAVY = ("libcudart", "libcublas", "libnccl", "libkgcuda")  # what a CPU run must not map


def build_dir():
    return os.environ.get("KG_BUILD_DIR") or os.path.join(ROOT, "build")


def needed(path):
    """The NEEDED entries of an ELF file's dynamic section (readelf -d)."""
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines()
            if "(NEEDED)" in line]


def mapped(pid):
    """The files mapped into process pid (/proc/PID/maps)."""
    with open("/proc/%d/maps" % pid) as f:
        return {line.split()[5] for line in f if len(line.split()) >= 6}


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        kb = [int(line.split()[1]) for line in f if line.startswith("VmRSS:")]
    return kb[0] / 1024.0


def heavy_in(files):
    return sorted(f for f in files if any(h in os.path.basename(f) for h in HEAVY))


def check_links(build):
    for prog in ("kogpt2d", "kogpt2", "kogpt2-train"):
        path = os.path.join(build, prog)
        if os.path.exists(path):
            bad = heavy_in(needed(path))
            check(not bad, "%s links %s" % (prog, bad))
    lib_path = os.path.join(build, "libkgcuda.so")
    deps = needed(lib_path)
    check(any(d.startswith("libcudart") for d in deps) and
          any(d.startswith("libcublas.") for d in deps), "libkgcuda.so needs %s" % deps)
    out = subprocess.run(["nm", "-D", "--defined-only", lib_path], capture_output=True,
                         text=True).stdout
    exported = sorted(line.split()[-1] for line in out.splitlines() if " T " in line or
                      " D " in line or " R " in line or " B " in line)
    check(exported == ["kg_cuda_backend_lib"], "libkgcuda.so exports %s" % exported[:10])
    nccl = os.path.join(build, "libkgnccl.so")
    if os.path.exists(nccl):  # the trainer's NCCL all-reduce (a CUDA build with MPI and NCCL)
        check(any(d.startswith("libnccl") for d in needed(nccl)), "libkgnccl.so: no libnccl")
        # it opens here too (its libraries resolve) and its door answers with the ABI of
        # train/dist_nccl.h
        with open(os.path.join(ROOT, "train", "dist_nccl.h")) as f:
            abi = int(re.search(r"#define DIST_NCCL_ABI\s+(\d+)", f.read()).group(1))
        door = ctypes.CDLL(nccl).kg_nccl_lib
        door.restype = ctypes.POINTER(ctypes.c_int)
        check(door()[0] == abi, "libkgnccl.so's door: ABI %d, not %d" % (door()[0], abi))


def serve_and_look(device):
    """kogpt2d on the default model with --device: (device line, heavy files mapped, RSS MiB)."""
    d = lib.Daemon(MODEL, "--device", device)
    try:
        files = mapped(d.proc.pid)
        rss = rss_mib(d.proc.pid)
        status = d.request("POST", "/v1/next-token", {"text": "안녕", "top_k": 3})[0]
        check(status == 200, "--device %s: next-token HTTP %d" % (device, status))
    finally:
        d.stop()
    # "kogpt2d: device: cpu-avx2, 2 threads (auto: no GPU; using the CPU)"
    line = next((l[l.index("device: "):] for l in d.log_text().splitlines() if "device: " in l),
                "")
    return line, heavy_in(files), rss


def run_copy(exe, device):
    """kogpt2d at exe (a copy) started with --device: its CompletedProcess (it must fail)."""
    return subprocess.run([exe, "--model", MODEL, "--host", "127.0.0.1", "--port",
                           str(lib.free_port()), "--device", device],
                          capture_output=True, text=True, timeout=60)


def check_broken_libraries(build, gpu):
    """A copy of kogpt2d beside no library, a non-library and a library without a door."""
    tmp = tempfile.mkdtemp(prefix="kg_device_")
    exe = os.path.join(tmp, "kogpt2d")
    shutil.copy2(os.path.join(build, "kogpt2d"), exe)
    lib_path = os.path.join(tmp, "libkgcuda.so")
    libm = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                             "/lib64/libm.so.6") if os.path.exists(p)), None)
    cases = [("missing", None, "cannot open shared object file"),
             ("not ELF", b"not an ELF file\n" * 64, "invalid ELF header"),
             ("without a door", libm, "has no symbol kg_cuda_backend_lib"),
             # tests/cuda_door_stub.c (ctest passes their paths)
             ("of another ABI", os.environ.get("KG_CUDA_STUB_ABI"), "is from another build"),
             ("with an op missing", os.environ.get("KG_CUDA_STUB_HOLE"), "op table is incomplete")]
    try:
        for what, content, want in cases:
            if os.path.exists(lib_path):
                os.remove(lib_path)
            if isinstance(content, bytes):
                with open(lib_path, "wb") as f:
                    f.write(content)
            elif content and os.path.exists(content):
                shutil.copy(content, lib_path)
            elif what != "missing":
                print("  libkgcuda.so %s: not checked (nothing to copy: %r)" % (what, content))
                continue
            r = run_copy(exe, "cuda")
            msg = (r.stderr + r.stdout).strip().splitlines()
            msg = next((l for l in msg if "cuda backend" in l), " | ".join(msg[-3:]))
            print("  libkgcuda.so %s, --device cuda: exit %d: %s" % (what, r.returncode, msg))
            check(r.returncode == 1 and lib_path in msg and want in msg,
                  "libkgcuda.so %s: exit %d, %r (want %r and the path)" % (what, r.returncode, msg,
                                                                     want))
            if not gpu:  # no GPU: auto never opens the library, whatever is there
                os.environ["KG_BUILD_DIR"] = tmp
                try:
                    line, heavy, _ = serve_and_look("auto")
                finally:
                    os.environ["KG_BUILD_DIR"] = build
                check("using the CPU" in line and not heavy,
                      "libkgcuda.so %s, --device auto: %r, mapped %s" % (what, line, heavy))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_cli(build, gpu):
    """kogpt2 next and kogpt2-train eval, --device auto: the files glibc loaded."""
    if gpu:
        return
    tmp = tempfile.mkdtemp(prefix="kg_device_")
    val = os.path.join(tmp, "val.txt")
    with open(val, "w") as f:
        f.write("여러분 2019년 수고하셨습니다. 올해에는 좋은 일만 가득하시길 바랍니다.\n" * 20)
    runs = [[os.path.join(build, "kogpt2"), "next", "--model", MODEL, "--text", "안녕",
             "--device", "auto"],
            [os.path.join(build, "kogpt2-train"), "eval", "--model", MODEL, "--val", val,
             "--seq", "32", "--device", "auto"]]
    env = dict(os.environ, LD_DEBUG="files")
    try:
        for cmd in runs:
            if not os.path.exists(cmd[0]):
                continue
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
            loaded = {w.split("=", 1)[1] for line in r.stderr.splitlines()
                      for w in line.split() if w.startswith("file=")}
            name = " ".join(os.path.basename(c) for c in cmd[:2])
            check(r.returncode == 0, "%s: exit %d: %s" % (name, r.returncode, r.stderr[-500:]))
            check(loaded and not heavy_in(loaded), "%s loaded %s" % (name, heavy_in(loaded)))
            print("  %s --device auto: %d files loaded, none of %s" % (name, len(loaded),
                                                                       "/".join(HEAVY)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    build = build_dir()
    if not os.path.exists(os.path.join(build, "libkgcuda.so")):
        print("SKIP: %s has no libkgcuda.so (a build without CUDA)" % build)
        return lib.SKIP
    lib.kogpt2d_path()
    check_links(build)

    line, heavy, rss_cpu = serve_and_look("cpu")
    print("--device cpu: %s; idle RSS %.0f MiB" % (line, rss_cpu))
    check(line.startswith("device: cpu") and not heavy, "--device cpu: %r, mapped %s" % (line,
                                                                                       heavy))
    line, heavy, rss_auto = serve_and_look("auto")
    gpu = line.startswith("device: cuda")
    print("--device auto: %s; idle RSS %.0f MiB" % (line, rss_auto))
    if gpu:
        check(any("libkgcuda" in h for h in heavy) and any("libcudart" in h for h in heavy),
              "auto on a GPU: mapped %s" % heavy)
    else:
        check("(auto: no GPU; using the CPU)" in line and not heavy,
              "--device auto without a GPU: %r, mapped %s" % (line, heavy))
        r = lib.kogpt2d_run(MODEL, "--port", str(lib.free_port()), "--device", "cuda")
        out = (r.stderr + r.stdout).strip()
        print("--device cuda: exit %d: %s" % (r.returncode, out.splitlines()[-1:]))
        check(r.returncode == 1 and "cuda backend: no GPU found" in out,
              "--device cuda without a GPU: exit %d, %r" % (r.returncode, out[-300:]))

    check_broken_libraries(build, gpu)
    check_cli(build, gpu)
    print("%d checks, %d failed" % (lib.CHECKS[0], len(lib.FAILURES)))
    return 1 if lib.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
