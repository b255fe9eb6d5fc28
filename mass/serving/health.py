"""Health checks for any Triton given by gRPC URL (the local one or a production NGC
container), run before a job sends it data: :func:`wait_until_ready`, :func:`check_server`."""

from __future__ import annotations

import time

from mass.errors import ChecksumMismatchError, ServingError
from mass.serving.access import client_headers, strip_scheme
from mass.serving.contract import served_sha256


def grpc_client(url: str):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url=strip_scheme(url))


def ready(client, model: str | None = None, version: str = "") -> bool:
    from tritonclient.utils import InferenceServerException

    try:
        if not client.is_server_ready(client_timeout=2.0):
            return False
        return model is None or client.is_model_ready(model, version, client_timeout=2.0)
    except InferenceServerException:
        return False


def wait_until_ready(
    url: str, *, model: str | None = None, version: str | int | None = None, timeout: float = 60.0
) -> None:
    """Block until the server at gRPC ``url`` (and ``model``, if given) is ready."""
    client = grpc_client(url)
    deadline = time.monotonic() + timeout
    while not ready(client, model, "" if version is None else str(version)):
        if time.monotonic() > deadline:
            what = f"model {model!r}" if model else "server"
            raise ServingError(
                f"Triton at {url}: {what} not ready after {timeout:.0f} s; check that the server "
                "runs (`mass serve --repository DIR`) and the model loaded (see the server log)"
            )
        time.sleep(0.25)


def check_server(
    url: str,
    *,
    model: str,
    version: str | int | None = None,
    expected_sha256: str | None = None,
    timeout: float = 5.0,
) -> dict:
    """Health-check ``model`` on the Triton at gRPC ``url`` before a job uses it.

    Returns ``{"name", "version" (the one checked), "versions" (loaded), "sha256"}``.
    Raises :class:`ServingError` when the server is
    unreachable, the model or version is not ready, and :class:`ChecksumMismatchError` when the
    served weights' recorded sha256 differs from ``expected_sha256``.
    """
    from tritonclient.utils import InferenceServerException

    client = grpc_client(url)
    try:
        live = client.is_server_live(client_timeout=timeout)
    except InferenceServerException as e:
        raise ServingError(
            f"Triton at {url} is unreachable ({e.message()}); start it with "
            "`mass serve --repository DIR` or pass the right --triton-url"
        ) from e
    if not live:
        raise ServingError(f"Triton at {url} answers but is not live; see its log")
    wanted = "" if version is None else str(version)
    try:
        ready = client.is_model_ready(model, wanted, client_timeout=timeout)
    except InferenceServerException as e:
        ready = False
        detail = e.message()
    else:
        detail = ""
    if not ready:
        available = _model_versions(client, model, url)
        if available and wanted:
            raise ServingError(
                f"Triton at {url}: model {model!r} version {wanted} is not loaded (loaded "
                f"versions: {available}); export that version or ask for one of those"
            )
        raise ServingError(
            f"Triton at {url}: model {model!r} is not loaded {detail}; check the repository "
            "(`mass export ... --name NAME`) and the server log"
        )
    try:
        config = client.get_model_config(model, wanted, as_json=True, client_timeout=timeout)[
            "config"
        ]
        meta = client.get_model_metadata(model, wanted, as_json=True, client_timeout=timeout)
    except InferenceServerException as e:
        raise ServingError(
            f"Triton at {url}: cannot read config of {model!r}: {e.message()}"
        ) from e
    params = config.get("parameters", {})
    versions = sorted((str(v) for v in meta.get("versions", [])), key=int)
    # Compare with the served version's own recorded sha (pinned, else the newest loaded).
    served_version = wanted or (versions[-1] if versions else "")
    served = served_sha256(params, served_version)
    if expected_sha256 is not None and served != expected_sha256:
        raise ChecksumMismatchError(
            f"Triton at {url}: model {model!r} version {served_version or '?'} serves weights "
            f"with sha256 {served or '(none)'} but {expected_sha256} was expected; re-export "
            "the run or point at the right model/version"
        )
    return {"name": model, "version": served_version, "versions": versions, "sha256": served}


def _model_versions(client, model: str, url: str) -> list[str]:
    from tritonclient.utils import InferenceServerException

    try:
        index = client.get_model_repository_index(as_json=True, headers=client_headers(url))
    except InferenceServerException:
        return []
    return sorted(
        m.get("version", "")
        for m in index.get("models", [])
        if m.get("name") == model and m.get("state") == "READY"
    )
