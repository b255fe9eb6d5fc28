"""Where the ``nvidia-pytriton`` wheel keeps ``tritonserver`` and what it needs to run
python-backend models here (found by experiment):

* ``--backend-directory``: the wheel's ``backends/python`` holds ``libtriton_python.so`` but no
  ``triton_python_backend_stub``; pytriton copies the stub for the running Python version from
  ``python_backend_stubs/3.X/`` at runtime. We do the same into a private temporary
  ``backends/python`` folder (:func:`prepare_backends`). The copied ``.so`` loses its
  ``$ORIGIN`` RPATH, so the wheel's ``nvidia_pytriton.libs`` goes on ``LD_LIBRARY_PATH``.
* ``LD_LIBRARY_PATH`` starts with ``sys.base_prefix/lib``: the stub links ``libpython3.11.so.1.0``
  and would otherwise pick the system one, whose stdlib clashes with this interpreter's.
* The stub embeds Python in *isolated* mode (``sys.flags.isolated == 1``): ``PYTHONPATH`` is
  ignored. We still export it (repo root + this interpreter's site-packages) and every
  ``model.py`` we generate starts with a three-line bootstrap that adds those folders to
  ``sys.path`` (with ``.pth`` processing, so the editable ``mass`` install and torch resolve).
  Without it ``import torch`` fails inside Triton (the base interpreter's site-packages is used).
* No GPU/driver here: the "CUDA driver version is insufficient", "CudaDriverHelper has not been
  initialized" and "DCGM unable to start" log lines are harmless; models use ``KIND_CPU``.
* The python backend creates its shared-memory regions (raw input embeddings) through boost,
  which ``fchmod()``s them to 0644 whatever the umask: :func:`build_shm_shim` compiles an
  ``LD_PRELOAD`` shim that keeps them 0600.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from mass.errors import ServingError

LOG = logging.getLogger(__name__)


# The python backend creates its shared-memory regions (raw input embeddings) through boost,
# which fchmod()s them to 0644 whatever the umask. This LD_PRELOAD shim, built at start with
# the system C compiler, drops the group/other bits of every fchmod() in tritonserver and its
# stubs, so the regions are 0600 from the moment they exist.
#
# It also ties every process of the server tree to its parent: the stubs are children of
# tritonserver and ignore SIGTERM, so a SIGKILLed job (whose server gets its parent-death
# signal) used to leave one ~380 MB stub per model behind. A thread started in each process
# polls getppid(): when the parent is gone, a stub SIGKILLs itself at once; tritonserver
# itself (which already has a parent-death signal from the job) gets 10 s to shut down first.
_SHM_SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
int fchmod(int fd, mode_t mode) {
    static int (*real)(int, mode_t) = 0;
    if (!real) real = (int (*)(int, mode_t))dlsym(RTLD_NEXT, "fchmod");
    return real(fd, mode & ~(mode_t)(S_IRWXG | S_IRWXO));
}
static pid_t mass_parent;
static int mass_grace;
static void *mass_watch(void *arg) {
    (void)arg;
    for (;;) {
        if (getppid() != mass_parent) {
            for (int i = 0; i < mass_grace; i++) usleep(500000);
            kill(getpid(), SIGKILL);
        }
        usleep(500000);
    }
    return 0;
}
__attribute__((constructor)) static void mass_tie_to_parent(void) {
    int sig = 0;
    pthread_t thread;
    prctl(PR_GET_PDEATHSIG, &sig);
    mass_grace = sig ? 20 : 0;
    mass_parent = getppid();
    if (mass_parent == 1) return;
    if (pthread_create(&thread, 0, mass_watch, 0) == 0) pthread_detach(thread);
}
"""


def build_shm_shim(workdir: Path) -> Path | None:
    """Compile the shim (0600 regions, processes tied to their parent; see ``_SHM_SHIM_C``)
    into ``workdir``; None without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        LOG.warning(
            "no C compiler: the python backend's shared-memory regions will be 0644 (readable "
            "by other local users); install cc or run the server as its own user"
        )
        return None
    src, lib = workdir / "shm0600.c", workdir / "libmass_shm0600.so"
    src.write_text(_SHM_SHIM_C)
    res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl",
                          "-lpthread"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    if res.returncode != 0:
        LOG.warning("could not build the shm shim (%s); regions will be 0644", res.stderr[-300:])
        return None
    return lib


@dataclass(frozen=True)
class TritonInstall:
    """Where the ``nvidia-pytriton`` wheel keeps the server, its python backend and its libs."""

    binary: Path
    python_backend: Path
    stub: Path
    libs: Path


def find_tritonserver() -> TritonInstall:
    """Locate ``tritonserver`` and the python backend inside the installed nvidia-pytriton wheel."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ServingError("nvidia-pytriton is not installed; `pip install nvidia-pytriton`")
    root = Path(next(iter(spec.submodule_search_locations)))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    install = TritonInstall(
        binary=root / "tritonserver" / "bin" / "tritonserver",
        python_backend=root / "tritonserver" / "backends" / "python",
        stub=root
        / "tritonserver"
        / "python_backend_stubs"
        / version
        / "triton_python_backend_stub",
        libs=root.parent / "nvidia_pytriton.libs",
    )
    for path in (install.binary, install.python_backend, install.stub):
        if not path.exists():
            raise ServingError(
                f"{path} is missing from the nvidia-pytriton wheel (Python {version}); "
                "reinstall nvidia-pytriton for this Python version"
            )
    return install


def python_path_for_models() -> list[str]:
    """Folders a model.py must put on ``sys.path``: the repo root, then this venv's site-packages."""
    repo_root = str(Path(__file__).resolve().parents[2])
    site = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    out: list[str] = []
    for p in [repo_root, *site, *extra]:
        if p not in out:
            out.append(p)
    return out


def server_env(install: TritonInstall) -> dict[str, str]:
    """The environment ``tritonserver`` and its python stubs need (see the module docstring).

    No key reaches them: every ``MASS_*`` variable (``MASS_NOISE_KEY_FILE``,
    ``MASS_SIGNING_KEY_FILE``, the access file, ...) and every variable named like a secret
    (``*KEY*``, ``*SECRET*``, ``*TOKEN*``, ``*PASSWORD*``, ``*CREDENTIAL*``) is dropped (the job
    verifies the staged models with the key, the adapters check the digests it wrote; noise
    seeds arrive keyed).
    """
    env = {k: v for k, v in os.environ.items() if not _secret_variable(k)}
    lib_dirs = [os.path.join(sys.base_prefix, "lib"), str(install.libs)]
    if env.get("LD_LIBRARY_PATH"):
        lib_dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(lib_dirs)
    env["PYTHONPATH"] = os.pathsep.join(python_path_for_models())
    # model.py imports must not drop __pycache__ into the (DVC-tracked) model repository
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # One thread per stub: the stubs share the machine with the caller (Beam workers).
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


_SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL")


def _secret_variable(name: str) -> bool:
    """Every ``MASS_*`` variable (key files, the local config naming them, the access file)
    and anything named like a secret (``AWS_SECRET_ACCESS_KEY``, ``*_TOKEN``, ...): the stubs
    need none of them."""
    upper = name.upper()
    return upper.startswith("MASS_") or any(w in upper for w in _SECRET_WORDS)


def prepare_backends(workdir: Path, install: TritonInstall) -> Path:
    backends = workdir / "backends"
    target = backends / "python"
    target.mkdir(parents=True, exist_ok=True)
    # Unlink first: after a SIGKILL the old stubs may still run these files, and copying
    # over a running executable fails with ETXTBSY (a restart must not depend on timing).
    for item in install.python_backend.iterdir():
        if item.is_file():
            (target / item.name).unlink(missing_ok=True)
            shutil.copy2(item, target / item.name)
    (target / "triton_python_backend_stub").unlink(missing_ok=True)
    shutil.copy2(install.stub, target / "triton_python_backend_stub")
    return backends
