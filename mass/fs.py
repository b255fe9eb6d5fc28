"""One filesystem layer for every read and write: local paths and object stores by URI.

Built on ``pyarrow.fs`` (already the Parquet engine, so no second IO stack): ``s3://``
(AWS or any S3-compatible endpoint through the standard ``AWS_*`` environment variables;
pyarrow >= 16 honours ``AWS_ENDPOINT_URL``, checked here with pyarrow 25 against moto's
server), ``gs://``, ``hdfs://`` and ``file://``, whatever the installed pyarrow was built
with. fsspec would add a second Parquet code path (pyarrow reads through Python callbacks)
and Beam's ``FileSystems`` has no random-access reads for Parquet footers and row groups.

Paths stay plain strings everywhere (they are what Beam pickles and what errors name); each
call resolves its filesystem from the string, so workers hold no state and need only the
same environment (credentials, endpoint) as the launcher. A local path is used as given;
``OSError`` keeps its errno (the disk-full check depends on it).

Object stores have no rename and no directories: :func:`replace` is only for local paths
(callers write objects once, under their final name: an object appears whole when its
upload completes), a "directory" is a key prefix, and :func:`isdir` is true when any key
lies below it.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob as _glob
import json
import os
import posixpath
import re
import shutil
import threading

import pyarrow.fs as pafs

from mass.errors import InputError, MassError, MissingInputError

GLOB_CHARS = "*?["
# Diagnostics: with $MASS_FS_TRACE set to a file, every open (read or write) appends
# "r|w <path>" to it: the cluster test checks that no worker opens a local path.
TRACE_ENV = "MASS_FS_TRACE"
_FS: dict[str, pafs.FileSystem] = {}
_FS_LOCK = threading.Lock()


def is_remote(path: str) -> bool:
    """True for an object-store / remote URI (``scheme://...``), False for a local path."""
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return path.removeprefix("file://")


def split(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (``s3://``, ``bucket/key``): scheme and filesystem path."""
    scheme, rest = uri.split("://", 1)
    return scheme + "://", rest.rstrip("/")


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) for ``path``; one filesystem per scheme+bucket
    per process (S3 clients are expensive to build)."""
    if not is_remote(path):
        return pafs.LocalFileSystem(), os.path.abspath(_local(path))
    scheme, rest = split(path)
    key = scheme + rest.split("/", 1)[0]
    with _FS_LOCK:
        fs = _FS.get(key)
    if fs is None:
        fs, _ = pafs.FileSystem.from_uri(key)
        with _FS_LOCK:
            _FS[key] = fs
    return fs, rest


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return posixpath.join(base.rstrip("/"), *parts)
    return os.path.join(base, *parts)


def dirname(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) if is_remote(path) else os.path.dirname(path)


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


def normpath(path: str) -> str:
    if is_remote(path):
        scheme, rest = split(path)
        return scheme + posixpath.normpath(rest)
    return os.path.normpath(path)


def _info(path: str) -> pafs.FileInfo:
    fs, p = filesystem(path)
    return fs.get_file_info(p)


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(_local(path))
    return _info(path).type != pafs.FileType.NotFound


def isdir(path: str) -> bool:
    if not is_remote(path):
        return os.path.isdir(_local(path))
    return _info(path).type == pafs.FileType.Directory


def isfile(path: str) -> bool:
    if not is_remote(path):
        return os.path.isfile(_local(path))
    return _info(path).type == pafs.FileType.File


def file_ancestor(path: str) -> str | None:
    """The nearest ancestor of ``path`` that exists as a file, not a directory (nothing can be
    created under it), or None. Stops at the first existing directory, the root or a bucket."""
    p = normpath(os.path.abspath(path) if not is_remote(path) else path)
    for _ in range(256):
        parent = dirname(p)
        if not parent or parent == p or (is_remote(p) and "/" not in split(parent)[1].strip("/")):
            return None  # the root, or a bucket (never a file)
        if isfile(parent):
            return parent
        if isdir(parent):
            return None
        p = parent
    return None


def stat_key(path: str) -> tuple[int, int]:
    """(size, mtime in ns) of a file: a cache key that changes when the file does."""
    if not is_remote(path):
        st = os.stat(_local(path))
        return st.st_size, st.st_mtime_ns
    info = _info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(errno.ENOENT, f"no such object: {path}")
    return int(info.size or 0), int(info.mtime_ns or 0)


def listdir(path: str) -> list[str]:
    """Names directly below ``path`` (files and sub-"directories"), sorted."""
    if not is_remote(path):
        return sorted(os.listdir(_local(path)))
    fs, p = filesystem(path)
    infos = fs.get_file_info(pafs.FileSelector(p, allow_not_found=True))
    return sorted(posixpath.basename(i.path) for i in infos)


def walk(root: str):
    """Like ``os.walk`` (top-down, ``dirs`` may be pruned in place) on any filesystem."""
    if not is_remote(root):
        yield from os.walk(_local(root))
        return
    fs, p = filesystem(root)
    infos = fs.get_file_info(pafs.FileSelector(p, recursive=True, allow_not_found=True))
    tree: dict[str, tuple[list[str], list[str]]] = {p: ([], [])}
    for info in sorted(infos, key=lambda i: i.path):
        parent, name = posixpath.split(info.path)
        tree.setdefault(parent, ([], []))
        if info.type == pafs.FileType.Directory:
            tree.setdefault(info.path, ([], []))
            tree[parent][0].append(name)
        else:
            tree[parent][1].append(name)
    scheme = split(root)[0]
    stack = [p]
    while stack:
        here = stack.pop()
        dirs, names = tree.get(here, ([], []))
        dirs = sorted(set(dirs))
        yield scheme + here, dirs, sorted(names)
        stack.extend(posixpath.join(here, d) for d in reversed(dirs))


def _glob_regex(pattern: str) -> re.Pattern:
    """A glob (``**`` spans directories, ``*``/``?``/``[..]`` do not) -> regex."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")  # like glob.glob: "d/**" matches d itself too
            i += 3
        elif pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            ch = pattern[i]
            if ch == "*":
                out.append("[^/]*")
            elif ch == "?":
                out.append("[^/]")
            elif ch == "[":
                j = pattern.find("]", i + 1)
                if j < 0:
                    out.append(re.escape(ch))
                else:
                    out.append(fnmatch.translate(pattern[i : j + 1])[4:-3])
                    i = j
            else:
                out.append(re.escape(ch))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob(pattern: str) -> list[str]:
    """Paths matching ``pattern`` (``**`` recursive), sorted; directories included."""
    if not is_remote(pattern):
        return sorted(_glob.glob(_local(pattern), recursive=True))
    scheme, rest = split(pattern)
    parts = rest.split("/")
    k = next(i for i, part in enumerate(parts) if any(ch in part for ch in GLOB_CHARS))
    root = "/".join(parts[:k])
    fs, _ = filesystem(pattern)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    rx = _glob_regex(rest)
    return sorted(scheme + i.path for i in infos if rx.match(i.path))


def trace(mode: str, path: str) -> None:
    log = os.environ.get(TRACE_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{mode} {path}\n")


def open_input(path: str):
    """A random-access pyarrow file (Parquet footers, row groups, Arrow IPC runs)."""
    trace("r", path)
    fs, p = filesystem(path)
    return fs.open_input_file(p)


def open_output(path: str):
    """A pyarrow output stream; parent "directories" are created where the store has them."""
    trace("w", path)
    fs, p = filesystem(path)
    if not is_remote(path):
        os.makedirs(os.path.dirname(p), exist_ok=True)
    return fs.open_output_stream(p)


@contextlib.contextmanager
def atomic_output(path: str):
    """Write ``path`` so that a reader sees the whole file or none: locally through
    ``path.part`` + rename; on an object store directly (an object appears when its upload
    completes; a failed write deletes it again)."""
    trace("w", path)
    if is_remote(path):
        fs, p = filesystem(path)
        f = fs.open_output_stream(p)
        try:
            yield f
        except BaseException:
            f.close()  # pyarrow cannot abort an upload: complete it, then delete the object
            with contextlib.suppress(OSError):
                fs.delete_file(p)
            raise
        f.close()
        return
    tmp = _local(path) + ".part"
    os.makedirs(os.path.dirname(os.path.abspath(tmp)), exist_ok=True)
    try:
        with pafs.LocalFileSystem().open_output_stream(os.path.abspath(tmp)) as f:
            yield f
        os.replace(tmp, _local(path))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_bytes(path: str, limit: int | None = None) -> bytes:
    with open_input(path) as f:
        return f.read(limit) if limit is not None else f.read()


def write_bytes(path: str, data: bytes) -> None:
    with atomic_output(path) as f:
        f.write(data)


def read_json(path: str, limit: int = 1 << 24):
    data = read_bytes(path, limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path}: larger than {limit} bytes")
    return json.loads(data.decode("utf-8"))


def read_json_object(path: str, *, remedy: str, error: type[MassError] = InputError) -> dict:
    """The JSON object in ``path``; every failure names the file and says ``remedy``: a
    missing file is :class:`MissingInputError`, unreadable JSON or another top-level value
    ``error``."""
    try:
        doc = read_json(path)
    except FileNotFoundError as e:
        raise MissingInputError(f"{path}: missing; {remedy}") from e
    except (OSError, ValueError) as e:
        raise error(f"{path}: not readable JSON ({e}); {remedy}") from e
    if not isinstance(doc, dict):
        raise error(f"{path}: expected a JSON object; {remedy}")
    return doc


def write_json(path: str, doc, *, indent: int | None = 2) -> None:
    text = json.dumps(doc, indent=indent, sort_keys=indent is not None)
    write_bytes(path, (text + ("\n" if indent is not None else "")).encode("utf-8"))


def makedirs(path: str) -> None:
    if not is_remote(path):
        os.makedirs(_local(path), exist_ok=True)
        return
    fs, p = filesystem(path)
    fs.create_dir(p, recursive=True)


def remove(path: str) -> None:
    if not is_remote(path):
        os.remove(_local(path))
        return
    fs, p = filesystem(path)
    fs.delete_file(p)


def rmtree(path: str) -> None:
    """Remove ``path`` and everything below it; a missing path is no error."""
    if not is_remote(path):
        shutil.rmtree(_local(path), ignore_errors=True)
        return
    fs, p = filesystem(path)
    info = fs.get_file_info(p)
    if info.type == pafs.FileType.Directory:
        fs.delete_dir(p)
    elif info.type == pafs.FileType.File:
        fs.delete_file(p)


def replace(src: str, dst: str) -> None:
    """Local rename (atomic); object stores have none: callers write final names there."""
    if is_remote(src) or is_remote(dst):
        raise OSError(f"cannot rename {src} -> {dst}: object stores have no rename")
    os.replace(_local(src), _local(dst))


def copy_tree(src: str, dest: str) -> list[str]:
    """Copy the files below ``src`` to the same relative names below ``dest`` (any two
    filesystems; within one store the copy stays server-side where pyarrow can). Returns the
    destination paths, sorted."""
    base = normpath(src) if is_remote(src) else os.path.normpath(_local(src))
    sep = "/" if is_remote(src) else os.sep
    copied = []
    for here, _, names in walk(base):
        rel = [p for p in here[len(base) :].split(sep) if p]
        for name in names:
            target = join(dest, *rel, name)
            trace("w", target)
            s_fs, s_p = filesystem(join(here, name))
            d_fs, d_p = filesystem(target)
            if not is_remote(target):
                os.makedirs(os.path.dirname(d_p), exist_ok=True)
            if s_fs is d_fs:
                s_fs.copy_file(s_p, d_p)
            else:
                pafs.copy_files(s_p, d_p, source_filesystem=s_fs, destination_filesystem=d_fs)
            copied.append(target)
    return sorted(copied)
