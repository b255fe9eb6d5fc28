"""The owner's secret key: what keeps release-time noise and export signatures unforgeable.

Threat model (docs/threat-model.md): the attacker has all our code, docs and config and every
release with its ids. Anything that protects a row must therefore depend on a secret; this
module is the only home of that secret.

A key file (``mass keygen PATH``) holds 32 random bytes as one text line
``mass-key-v1:<64 hex digits>``, mode 0600. Purposes never use the key itself: each derives
its own subkey with BLAKE2b personalisation (``noise``, ``sign``, ...), so one file can serve
several purposes without one use revealing another. A fingerprint (a keyed hash of a fixed
string, 16 hex digits) names a key in lineage metadata without revealing it.

Key files are found from an explicit path or an environment variable:
``MASS_NOISE_KEY_FILE`` (release-time noise) and ``MASS_SIGNING_KEY_FILE`` (export signatures).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field

from mass.errors import ConfigError

PREFIX = "mass-key-v1:"
KEY_BYTES = 32
NOISE_KEY_ENV = "MASS_NOISE_KEY_FILE"
SIGNING_KEY_ENV = "MASS_SIGNING_KEY_FILE"


@dataclass(frozen=True)
class OwnerKey:
    """A 256-bit owner secret. ``repr`` never shows the bytes."""

    secret: bytes = field(repr=False)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        if len(self.secret) != KEY_BYTES:
            raise ConfigError(f"{self.source}: a key is {KEY_BYTES} bytes, got {len(self.secret)}")

    def subkey(self, purpose: str, size: int = 32) -> bytes:
        """A key for one purpose only (BLAKE2b keyed by the secret, personalised by purpose)."""
        person = purpose.encode()
        if not 0 < len(person) <= 16:
            raise ValueError(f"purpose {purpose!r}: 1-16 bytes")
        return hashlib.blake2b(b"", key=self.secret, person=person, digest_size=size).digest()

    @property
    def fingerprint(self) -> str:
        """16 hex digits naming this key in metadata and logs; reveals nothing of the key."""
        return self.subkey("fingerprint", 8).hex()

    def mac(self, purpose: str, data: bytes) -> str:
        """HMAC-SHA256 of ``data`` under the subkey of ``purpose`` (hex)."""
        return hmac.new(self.subkey(purpose), data, hashlib.sha256).hexdigest()

    def verify(self, purpose: str, data: bytes, tag: str) -> bool:
        """Constant-time check of a tag made by :meth:`mac`."""
        return hmac.compare_digest(self.mac(purpose, data), str(tag))

    @classmethod
    def generate(cls) -> OwnerKey:
        return cls(secrets.token_bytes(KEY_BYTES), "<new>")


def write_key(path: str) -> OwnerKey:
    """Write a new random key to ``path`` (mode 0600); never overwrite an existing path."""
    key = OwnerKey.generate()
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"{path}: directory {parent} does not exist; create it first")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o600)  # fmt: skip
    except FileExistsError as e:
        raise ConfigError(
            f"{path}: already exists; a key is never overwritten (rotating it changes every "
            "future release's noise: move the old key away yourself if that is what you want)"
        ) from e
    with os.fdopen(fd, "w") as f:
        f.write(PREFIX + key.secret.hex() + "\n")
    os.chmod(path, 0o600)  # in case the umask widened nothing, keep it explicit
    return OwnerKey(key.secret, path)


def read_key(path: str) -> OwnerKey:
    """Read a key file written by :func:`write_key`; errors name the file and what to do.

    Refused: a symlink (never followed: whoever controls the link picks the key), a file owned
    by another user (who could swap it) or readable by others, anything but one
    ``mass-key-v1:`` line of 64 hex digits, and a secret that is plainly not random (all one
    byte, few distinct bytes, an arithmetic run, or printable text: see :func:`weak_reason`).
    """
    try:
        link = os.lstat(path)
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: no such key file; create one with `mass keygen {path}`") from e
    if stat.S_ISLNK(link.st_mode):
        raise ConfigError(
            f"{path}: a symlink (to {os.path.realpath(path)}); key files are never read through "
            f"a link: pass the real file, or copy it with `install -m 600 SOURCE {path}`"
        )
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise ConfigError(f"{path}: cannot open the key file ({e})") from e
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file; pass a key file from `mass keygen`")
        if st.st_uid != os.geteuid():
            raise ConfigError(
                f"{path}: key file is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}): "
                f"its owner could replace it; use a key you own (`mass keygen`) or have it "
                f"copied to you (`install -m 600 {path} MYKEY`)"
            )
        if st.st_mode & 0o077:
            raise ConfigError(
                f"{path}: key file is readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                f"run `chmod 600 {path}`"
            )
        text = f.read(4096).strip()
    if not text.startswith(PREFIX):
        raise ConfigError(f"{path}: not a MaSS key file (expected '{PREFIX}...'); use mass keygen")
    try:
        secret = bytes.fromhex(text[len(PREFIX) :])
    except ValueError as e:
        raise ConfigError(f"{path}: corrupt key file (hex digits expected)") from e
    if len(secret) != KEY_BYTES:
        raise ConfigError(f"{path}: corrupt key file ({len(secret)} bytes, {KEY_BYTES} expected)")
    weak = weak_reason(secret)
    if weak:
        raise ConfigError(
            f"{path}: not a random key ({weak}); anyone could guess it. Create a key with "
            "`mass keygen NEWFILE` (releases made with this one have no keyed protection)"
        )
    return OwnerKey(secret, path)


MIN_DISTINCT_BYTES = 20  # 32 random bytes have ~30 distinct values; < 20: p < 1e-10


def weak_reason(secret: bytes) -> str | None:
    """Why ``secret`` is plainly not 32 random bytes, or None. Random bytes fail none of these
    checks except with negligible probability (printable text: (95/256)^32 ~ 2e-14)."""
    if len(set(secret)) == 1:
        return f"all {len(secret)} bytes are 0x{secret[0]:02x}"
    if len(set(secret)) < MIN_DISTINCT_BYTES:
        return f"only {len(set(secret))} distinct byte values"
    steps = {(b - a) % 256 for a, b in zip(secret, secret[1:], strict=False)}
    if len(steps) == 1:
        return "an arithmetic run of bytes"
    if all(0x20 <= b < 0x7F for b in secret):
        return "printable text, like a password"
    return None


def resolve_key(path: str | None, env: str) -> OwnerKey | None:
    """The key named by ``path``, else by the environment variable ``env``, else None."""
    chosen = path or os.environ.get(env) or None
    return read_key(chosen) if chosen else None
