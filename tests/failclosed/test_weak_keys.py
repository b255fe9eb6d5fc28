"""Keys that are not random, and key paths that are not files, are refused before use
(mass.keys.read_key): a passphrase padded with a byte, two interleaved byte runs, short blocks
repeated with a counter; a FIFO, a directory or a device at the key path is refused from its
lstat before it is opened, so a FIFO never blocks the job. Keys from `mass keygen` still pass."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from mass.errors import ConfigError
from mass.keys import read_key, weak_reason, write_key

PASSPHRASE = b"Tr0ub4dor&3 quick-jumping ZEBRA"  # 31 printable bytes, 26 distinct

INTERLEAVED = bytes(b for i in range(16) for b in ((0x11 + 5 * i) % 256, (0xC3 + 9 * i) % 256))
BLOCKS = bytes(
    (base + i // 4) % 256 for i in range(32) for base in [(0x3A, 0x91, 0x07, 0xE5)[i % 4]]
)


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        (PASSPHRASE + b"\x01", r"printable text, like a password \(31 of 32"),
        (b"\x00\x01" + PASSPHRASE[:29] + b"\xff", r"printable text, like a password \(29 of 32"),
        (INTERLEAVED, r"a low-complexity pattern: bytes 2 apart differ by only 2 distinct steps"),
        (BLOCKS, r"a low-complexity pattern: bytes 1 apart differ by only 4 distinct steps"),
    ],
    ids=["passphrase+0x01", "passphrase padded 3", "interleaved runs", "counted blocks"],
)
def test_a_guessable_key_is_refused_by_name(tmp_path, key_file_of, secret, why):
    assert len(secret) == 32 and len(set(secret)) >= 20  # past the older checks
    path = key_file_of(tmp_path / "weak.key", secret)
    with pytest.raises(ConfigError, match=rf"^{path}: not a random key \({why}.*mass keygen"):
        read_key(path)


def test_many_keygen_keys_still_pass(tmp_path):
    for i in range(300):
        path = str(tmp_path / f"k{i}")
        written = write_key(path)
        assert read_key(path).secret == written.secret


def _read_in_child(path: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        from mass.keys import read_key
        from mass.errors import ConfigError
        try:
            read_key({path!r})
        except ConfigError as e:
            print("REFUSED", e)
    """)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)  # fmt: skip


@pytest.mark.parametrize("kind", ["FIFO", "directory", "character device"])
def test_a_key_path_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path, kind):
    path = str(tmp_path / "owner.key")
    if kind == "FIFO":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        os.mkdir(path, 0o700)
    else:
        path = "/dev/zero"
    try:
        out = _read_in_child(path)  # a FIFO opened for reading blocks until a writer comes
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading a {kind} as the key hung")
    assert f"REFUSED {path}: not a regular file (a {kind}); nothing was read" in out.stdout, out


def test_the_checks_keep_their_margin_on_random_keys():
    """Random bytes sit far from every threshold (a miss here would mean a real key refused)."""
    assert not [k for k in (os.urandom(32) for _ in range(50_000)) if weak_reason(k)]
