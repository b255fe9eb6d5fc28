"""Serving on Triton: one module per concern.

* :mod:`.contract` - the Triton contract: tensor names and dtypes, config parameters, the files
  of an export, the access header, and the provenance readers (``export.json``, served config);
* :mod:`.manifest` - signed export manifests (sign, verify a version or a whole repository);
* :mod:`.export` / :mod:`.repository` - ``mass export``: version folders, config.pbtxt, model.py;
* :mod:`.adapters` - the python-backend models that the generated ``model.py`` imports;
* :mod:`.install` / :mod:`.server` / :mod:`.process` - the local ``tritonserver`` process
  (:class:`TritonServer`); :mod:`.foreground` - ``mass serve`` (run it until SIGINT/SIGTERM);
* :mod:`.access` - the token of the restricted APIs (shared memory, model control);
* :mod:`.health` - readiness and sha256 checks of any server before a job uses it.

The names below are the package's public API (``from mass.serving import TritonServer``).
Nothing here imports torch or Beam.
"""

from mass.serving.access import client_headers, write_access_file
from mass.serving.contract import ACCESS_FILE_ENV, ACCESS_HEADER, SHA256_PARAMETER
from mass.serving.health import check_server, wait_until_ready
from mass.serving.install import (
    TritonInstall,
    find_tritonserver,
    python_path_for_models,
    server_env,
)
from mass.serving.manifest import verify_repository
from mass.serving.server import TritonServer, free_port

__all__ = [
    "ACCESS_FILE_ENV",
    "ACCESS_HEADER",
    "SHA256_PARAMETER",
    "TritonInstall",
    "TritonServer",
    "check_server",
    "client_headers",
    "find_tritonserver",
    "free_port",
    "python_path_for_models",
    "server_env",
    "verify_repository",
    "wait_until_ready",
    "write_access_file",
]
