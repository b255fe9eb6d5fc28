"""The owner's secret key: what keeps release-time noise and export signatures unforgeable.

Threat model (docs/threat-model.md): the attacker has all our code, docs and config and every
release with its ids. Anything that protects a row must therefore depend on a secret; this
module is the only home of that secret.

A key file (``mass keygen PATH``) holds 32 random bytes as one text line
``mass-key-v1:<64 hex digits>``, mode 0600. Purposes never use the key itself: each derives
its own subkey with BLAKE2b personalisation (``noise``, ``sign``, ...), so one file can serve
several purposes without one use revealing another. A fingerprint (a keyed hash of a fixed
string, 16 hex digits) names a key in lineage metadata without revealing it.

Key files are found, first match wins, from an explicit path (``--noise-key-file``,
``--signing-key-file``), an environment variable (``MASS_NOISE_KEY_FILE`` for release-time
noise, ``MASS_SIGNING_KEY_FILE`` for export signatures), or the local config ``.mass/local.yaml``
in the working directory (``noise_key_file:`` / ``signing_key_file:``, relative paths against
the directory holding ``.mass/``). ``make demo`` writes that file: it names the key's *path*,
never the key, and is git-ignored, so ``dvc repro`` and ``dvc exp run`` find the key from a
plain shell. ``MASS_LOCAL_CONFIG`` names another local config file ("" reads none).
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
LOCAL_CONFIG = os.path.join(".mass", "local.yaml")
LOCAL_CONFIG_ENV = "MASS_LOCAL_CONFIG"
_LOCAL_FIELD = {NOISE_KEY_ENV: "noise_key_file", SIGNING_KEY_ENV: "signing_key_file"}


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
    """Write a new random key to ``path`` (mode 0600); never overwrite an existing path. A draw
    that :func:`weak_reason` would refuse (probability below 1e-9) is drawn again, so every key
    `mass keygen` writes is read back."""
    key = OwnerKey.generate()
    while weak_reason(key.secret):
        key = OwnerKey.generate()
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"{path}: directory {parent} does not exist; create it first")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o600)  # fmt: skip
    except FileExistsError as e:
        if os.path.isdir(path):
            raise ConfigError(f"{path}: is a directory; name a new key file (e.g. "
                              f"{os.path.join(path, 'owner.key')})") from e  # fmt: skip
        raise ConfigError(
            f"{path}: already exists; a key is never overwritten (rotating it changes every "
            "future release's noise: move the old key away yourself if that is what you want)"
        ) from e
    except OSError as e:  # a directory, no permission, a path the system refuses
        raise ConfigError(f"{path}: cannot create a key file there ({e.strerror}); name a new "
                          "file in a directory you own") from e  # fmt: skip
    with os.fdopen(fd, "w") as f:
        f.write(PREFIX + key.secret.hex() + "\n")
    os.chmod(path, 0o600)  # in case the umask widened nothing, keep it explicit
    return OwnerKey(key.secret, path)


def read_key(path: str) -> OwnerKey:
    """Read a key file written by :func:`write_key`; errors name the file and what to do.

    Refused: a symlink (never followed: whoever controls the link picks the key), anything but
    a regular file (a FIFO, device, socket or directory is refused from its ``lstat`` before it
    is opened, so a FIFO never blocks the job; the open itself is non-blocking and must find
    the same file), a file owned by another user (who could swap it) or readable by others,
    anything but one ``mass-key-v1:`` line of 64 hex digits, and a secret that is plainly not
    random (see :func:`weak_reason`).
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
    if not stat.S_ISREG(link.st_mode):
        raise ConfigError(
            f"{path}: not a regular file ({_file_kind(link.st_mode)}); nothing was read from it. "
            "Pass a key file from `mass keygen`"
        )
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise ConfigError(f"{path}: cannot open the key file ({e})") from e
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (link.st_dev, link.st_ino):
            raise ConfigError(
                f"{path}: replaced while it was being opened (now {_file_kind(st.st_mode)}); "
                "pass a key file from `mass keygen` that nobody else can change"
            )
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
        try:
            text = f.read(4096).strip()
        except UnicodeDecodeError:  # binary content: no key file of ours
            text = ""
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


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return f"file type {stat.S_IFMT(mode):o}"


MIN_DISTINCT_BYTES = 20  # 32 random bytes have ~30 distinct values; < 20: p < 1e-10
# printable bytes (0x20-0x7e) among 32 random ones: Binomial(32, 95/256), mean 11.9; P(>= 29)
# ~ 4e-10, while a passphrase padded with up to three other bytes still has >= 29
MAX_PRINTABLE = 28
MAX_PATTERN_STRIDE = 16  # repeated blocks and interleaved runs of period up to 16


def weak_reason(secret: bytes) -> str | None:
    """Why ``secret`` is plainly not 32 random bytes, or None. Random bytes fail none of these
    checks except with negligible probability (tests/mass/test_keys.py draws 20,000).

    Refused: one byte repeated; fewer than 20 distinct bytes; an arithmetic run; more than 28
    printable bytes (a passphrase, padded or not); and a low-complexity pattern: for some
    stride s <= 16 the differences ``b[i+s] - b[i]`` (mod 256) or ``b[i+s] ^ b[i]`` take
    fewer than half as many values as there are pairs (repeated blocks of period s, several
    byte runs interleaved every s bytes). Random pairs collide with probability 1/256, so
    half of 16 or more colliding is beyond any realistic chance."""
    if len(set(secret)) == 1:
        return f"all {len(secret)} bytes are 0x{secret[0]:02x}"
    if len(set(secret)) < MIN_DISTINCT_BYTES:
        return f"only {len(set(secret))} distinct byte values"
    steps = {(b - a) % 256 for a, b in zip(secret, secret[1:], strict=False)}
    if len(steps) == 1:
        return "an arithmetic run of bytes"
    printable = sum(0x20 <= b < 0x7F for b in secret)
    if printable > MAX_PRINTABLE:
        return f"printable text, like a password ({printable} of {len(secret)} bytes printable)"
    for s in range(1, min(MAX_PATTERN_STRIDE, len(secret) // 2) + 1):
        pairs = list(zip(secret, secret[s:], strict=False))
        for name, values in (
            ("steps", {(b - a) % 256 for a, b in pairs}),
            ("xors", {a ^ b for a, b in pairs}),
        ):
            if 2 * len(values) < len(pairs):
                return (
                    f"a low-complexity pattern: bytes {s} apart differ by only {len(values)} "
                    f"distinct {name} over {len(pairs)} pairs (repeated blocks or interleaved runs)"
                )
    return None


STATE_ENV = "MASS_STATE_DIR"


def state_dir() -> str:
    """The owner's private state directory: ``$MASS_STATE_DIR``, else ``$XDG_STATE_HOME/mass``,
    else ``~/.local/state/mass``. It holds what only the owner may read and no repository or
    release carries: the newest-version ledger (:mod:`mass.serving.newest`) and per-release
    pseudonym maps (:mod:`mass.pseudonym`). Created 0700 by whoever writes there first."""
    chosen = os.environ.get(STATE_ENV)
    if chosen:
        return os.path.abspath(chosen)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                              "state")  # fmt: skip
    return os.path.join(os.path.abspath(base), "mass")


def local_config() -> str | None:
    """The local config file consulted for key paths (absolute), or None when disabled."""
    chosen = os.environ.get(LOCAL_CONFIG_ENV, LOCAL_CONFIG)
    return os.path.abspath(chosen) if chosen else None


def _from_local_config(env: str) -> str | None:
    cfg = local_config()
    if cfg is None or not os.path.exists(cfg):
        return None
    import yaml

    try:
        with open(cfg) as f:
            doc = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{cfg}: unreadable local config ({e}); fix or delete it") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{cfg}: expected a mapping such as 'noise_key_file: .mass/owner.key'")
    value = doc.get(_LOCAL_FIELD[env])
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{cfg}: {_LOCAL_FIELD[env]} must be a key file's path, got {value!r}")
    base = os.path.dirname(os.path.dirname(cfg))  # the directory holding .mass/
    return os.path.join(base, os.path.expanduser(value))


def key_file(path: str | None, env: str) -> str | None:
    """The key file named by ``path``, else by ``$env``, else by the local config; or None."""
    return path or os.environ.get(env) or _from_local_config(env) or None


def looked_for(env: str) -> str:
    """Where :func:`key_file` looks, for error messages."""
    cfg = local_config()
    local = f", {_LOCAL_FIELD[env]} in {cfg} (written by `make demo`)" if cfg else ""
    return f"the flag, ${env}{local}"


def resolve_key(path: str | None, env: str) -> OwnerKey | None:
    """The key named by ``path``, else ``$env``, else the local config (:func:`key_file`);
    None when none names one. A named file that is missing is an error naming who named it."""
    chosen = key_file(path, env)
    if not chosen:
        return None
    if not path and not os.environ.get(env) and not os.path.exists(chosen):
        raise ConfigError(
            f"{chosen}: no such key file (named by {_LOCAL_FIELD[env]} in {local_config()}); "
            f"create it with `mass keygen {chosen}` or fix that line"
        )
    return read_key(chosen)
