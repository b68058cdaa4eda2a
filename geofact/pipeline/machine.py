"""The CPU a page ran on, and the matmul kernels it ran through: what decides the rounding of a trained run.

Two machines with the same code, seeds and recipe train different runs when their BLAS kernels sum in
another order (issue 45: an AVX2-only AMD EPYC moved a capacity threshold by a factor of 2 against the
committed pages). A page's provenance therefore names the CPU model, its vector extensions, the kernel
path torch dispatches to (`torch.backends.cpu.get_cpu_capability`), the BLAS torch was built with, and
any MKL setting in the environment that picks a code path (MKL_CBWR, MKL_ENABLE_INSTRUCTIONS).

Read by the publisher, which runs the page's kernel on the same machine with the same environment: what
only torch can say (the kernel path, the BLAS, the device's name) it asks of a fresh interpreter, the
kernels' own, so that the publisher never imports torch. No page imports this module, so describing the
machine never makes a page stale.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

KERNEL_PATH_ENVS = ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
_VECTOR_FLAGS = ("avx512f", "avx2", "fma", "avx")  # the widest first: the one a kernel can use


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; `platform.processor()` elsewhere)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), flags=re.M)
        if match:
            return " ".join(match.group(1).split())
    return platform.processor() or platform.machine() or "unknown"


def vector_extensions() -> list[str]:
    """The x86 vector extensions the CPU reports, widest first (empty off Linux or off x86)."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return []
    match = re.search(r"^flags\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), flags=re.M)
    flags = set(match.group(1).split()) if match else set()
    return [f for f in _VECTOR_FLAGS if f in flags]


TORCH_PROBE = r"""
import hashlib, json, re, sys
import torch
from geofact.device import describe_device
config = torch.__config__.show()
mkl = re.search(r"(Intel\(R\)[^\n]*Math Kernel Library Version [\d.]+)", config)
info = re.search(r"BLAS_INFO=(\w+)", config)
g = torch.Generator().manual_seed(0)
x, y = torch.randn(64, 96, 200, generator=g), torch.randn(64, 200, 384, generator=g)
rows, table = torch.randn(128, 4096, generator=g), torch.randn(4096, 96, generator=g)
digest, threads = hashlib.sha256(), torch.get_num_threads()
for n in (1, threads):  # a sweep's workers train on one thread, a page's own runs on every core
    torch.set_num_threads(n)
    for o in (torch.bmm(x, y), rows @ table, rows.sum(), rows.logsumexp(-1),
              torch.nn.functional.layer_norm(rows, (4096,)), torch.nn.functional.gelu(rows).sum(0)):
        digest.update(o.numpy().tobytes())
digest = digest.hexdigest()[:16]
print(json.dumps({"kernel_path": torch.backends.cpu.get_cpu_capability(),
                  "blas": mkl.group(1) if mkl else info.group(1) if info else "unknown",
                  "rounding_digest": digest,
                  "device": describe_device(sys.argv[1])}))
"""


@functools.lru_cache(maxsize=None)
def _probe(device: str, kernel_env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """What only torch can say, asked of a fresh interpreter (the kernels' own, under `kernel_env`), so that the
    publisher never imports torch: the kernel path torch dispatches to (`get_cpu_capability`), the BLAS it
    was built with (its build configuration's MKL version, or its BLAS_INFO), `rounding_digest`, and `device` as
    `geofact.device.describe_device` names it, an error for a device this machine lacks."""
    base = {k: v for k, v in os.environ.items() if k not in KERNEL_PATH_ENVS}
    done = subprocess.run([sys.executable, "-c", TORCH_PROBE, device], env={**base, **dict(kernel_env)},
                          capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:  # the last line of the traceback, less the exception's name: resolve_device's message
        last = (done.stderr.strip().splitlines() or ["the torch probe failed with no message"])[-1]
        raise RuntimeError(re.sub(r"^[\w.]*(Error|Exception): ", "", last))
    return json.loads(done.stdout.strip().splitlines()[-1])


def torch_facts(device: str = "cpu", environ: dict[str, str] | None = None) -> dict[str, str]:
    """{kernel_path, blas, rounding_digest, device} for `device` under `environ`'s kernel-path settings (default: this
    process's), from the torch the kernels run (`_probe`)."""
    environ = dict(os.environ if environ is None else environ)
    return _probe(str(device), tuple(sorted((k, environ[k]) for k in KERNEL_PATH_ENVS if environ.get(k))))


def describe_machine(environ: dict[str, str] | None = None) -> dict[str, object]:
    """{cpu, cores, vector_extensions, kernel_path, blas, kernel_env, rounding_digest}: the machine a page's numbers
    come from. `environ` (default: this process's) is the environment its kernel ran under; the digest
    (`rounding_digest`) says whether two machines round alike, which their names cannot."""
    environ = dict(os.environ if environ is None else environ)
    facts = torch_facts("cpu", environ)
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "vector_extensions": vector_extensions(),
        "kernel_path": facts["kernel_path"],
        "blas": facts["blas"],
        "kernel_env": {k: environ[k] for k in KERNEL_PATH_ENVS if environ.get(k)},
        "rounding_digest": facts["rounding_digest"],
    }


def machine_line(machine: dict | None) -> str:
    """One line for a provenance box or the status page; '' where the provenance predates this record."""
    if not machine:
        return ""
    env = ", ".join(f"{k}={v}" for k, v in machine.get("kernel_env", {}).items())
    return (f"{machine['cpu']} ({machine.get('cores', '?')} cores; kernels {machine['kernel_path']}, "
            f"{machine['blas']}{'; ' + env if env else ''})")


def rounding_digest(extra_env: dict[str, str]) -> str:
    """16 hex digits of sha256 over float32 results in the shapes of a training step (a batched matmul, a matmul
    summing over 4,096, and the reductions, log-sum-exp, layer norm and GELU of ATen's vectorised kernels), on one
    thread and on all (a reduction's partial sums follow the thread count), computed in a fresh interpreter under
    `extra_env` and no other kernel-path setting: BLAS reads its code-path settings
    once, when it loads, so it must be a new process. Two machines whose digests are equal rounded these alike; two
    whose digests differ round a trained run otherwise."""
    return _probe("cpu", tuple(sorted(extra_env.items())))["rounding_digest"]
