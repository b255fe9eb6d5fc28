"""The access token of the restricted server APIs (shared memory, model control).

A server that :class:`mass.serving.TritonServer` starts takes a random token on its command
line (``--grpc-restricted-protocol``/``--http-restricted-api``); only the process that started
it (:func:`client_headers`, :func:`register`) and processes pointed at the access file that
``mass serve`` writes (:func:`write_access_file`, ``MASS_TRITON_ACCESS_FILE``) hold it.
"""

from __future__ import annotations

import os
from pathlib import Path

from mass.errors import ServingError
from mass.serving.contract import ACCESS_FILE_ENV, ACCESS_HEADER, GRPC_HEADER_PREFIX

_ACCESS: dict[str, str] = {}  # grpc/http address -> access token of servers started here


def register(address: str, token: str) -> None:
    """Record the token of a server this process started at ``address``."""
    _ACCESS[address] = token


def forget(address: str, token: str) -> None:
    if _ACCESS.get(address) == token:
        del _ACCESS[address]


def client_headers(url: str | None, *, protocol: str = "grpc") -> dict[str, str]:
    """The gRPC (or ``protocol="http"``) header that opens the restricted APIs of the server
    at ``url``: the token of the server this process started there, else the one in the file
    named by ``MASS_TRITON_ACCESS_FILE`` (written by ``mass serve``), else ``{}`` (shared
    memory and model loading are then refused by the server)."""
    token = _ACCESS.get(strip_scheme(url)) if url else None
    if token is None:
        token = _access_file_token()
    if token is None:
        return {}
    return {(GRPC_HEADER_PREFIX if protocol == "grpc" else "") + ACCESS_HEADER: token}


def write_access_file(path: str | os.PathLike[str], token: str) -> None:
    """``mass serve``: the token for other processes of this user (mode 0600, new file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{ACCESS_HEADER}={token}\n")


def _access_file_token() -> str | None:
    path = os.environ.get(ACCESS_FILE_ENV)
    if not path:
        return None
    try:
        st = os.stat(path)
        text = Path(path).read_text().strip()
    except OSError as e:
        raise ServingError(f"{ACCESS_FILE_ENV}={path}: unreadable ({e}); unset it or fix it") from e
    if st.st_mode & 0o077:
        raise ServingError(f"{path}: readable by others; run `chmod 600 {path}`")
    key, sep, value = text.partition("=")
    if not sep or key != ACCESS_HEADER or not value:
        raise ServingError(f"{path}: not an access file of `mass serve` ({ACCESS_HEADER}=...)")
    return value


def strip_scheme(url: str) -> str:
    for scheme in ("grpc://", "http://", "https://"):
        if url.startswith(scheme):
            return url[len(scheme) :]
    return url
