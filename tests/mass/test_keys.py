"""The owner key and the keyed PRF: secret in, unpredictable seeds out."""

from __future__ import annotations

import os
import stat

import numpy as np
import pyarrow as pa
import pytest

from mass.cli import main
from mass.errors import ConfigError
from mass.keys import OwnerKey, read_key, resolve_key, write_key
from mass.noise import keyed_row_seeds, row_seeds, siphash24_u64


def test_siphash_matches_the_reference_test_vector():
    # SipHash paper, appendix A: key 00..0f, message 00..07 -> 0x93f5f5799a932462
    key = bytes(range(16))
    msg = np.array([int.from_bytes(bytes(range(8)), "little")], dtype=np.uint64)
    out = siphash24_u64(int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little"), msg)
    assert int(out[0]) == 0x93F5F5799A932462


def test_keygen_writes_0600_and_refuses_to_overwrite(tmp_path, capsys):
    path = tmp_path / "owner.key"
    assert main(["keygen", str(path)]) == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    first = path.read_bytes()
    key = read_key(str(path))
    assert key.fingerprint in capsys.readouterr().out
    assert key.secret.hex() not in repr(key)
    assert main(["keygen", str(path)]) == 2
    assert path.read_bytes() == first
    assert main(["keygen", str(tmp_path)]) == 2  # a directory: named as one
    assert f"{tmp_path}: is a directory; name a new key file" in capsys.readouterr().err


def test_key_file_readable_by_others_is_refused(tmp_path):
    path = str(tmp_path / "k")
    write_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_key(path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o660, 0o700 | 0o010])
def test_a_key_file_any_group_or_other_bit_reaches_is_refused(tmp_path, mode):
    """Group-readable (0640) is as bad as world-readable: only the owner may read the key."""
    path = str(tmp_path / "k")
    write_key(path)
    os.chmod(path, mode)
    with pytest.raises(ConfigError, match=f"mode {mode:o}.*chmod 600"):
        read_key(path)
    os.chmod(path, 0o600)
    read_key(path)  # the owner's bits alone are fine


def test_the_published_fingerprint_is_made_of_no_key_bytes():
    """Every release carries the fingerprint: it is a keyed hash, never bytes of the key."""
    for seed in range(8):
        secret = np.random.default_rng(seed).bytes(32)
        fp = bytes.fromhex(OwnerKey(secret).fingerprint)
        assert len(fp) == 8
        windows = {secret[i : i + 4] for i in range(len(secret) - 3)}
        for f in (fp, fp[::-1]):  # no 4-byte run of the key, either way round
            assert not any(f[i : i + 4] in windows for i in range(len(f) - 3))


def test_corrupt_or_missing_key_files_are_named(tmp_path, monkeypatch):
    bad = tmp_path / "bad"
    bad.write_text("hello\n")
    os.chmod(bad, 0o600)
    with pytest.raises(ConfigError, match="not a MaSS key file"):
        read_key(str(bad))
    binary = tmp_path / "random"  # random bytes, not UTF-8 (before: UnicodeDecodeError)
    binary.write_bytes(b"\xfb\x00\xff" * 11)
    os.chmod(binary, 0o600)
    with pytest.raises(ConfigError, match="not a MaSS key file"):
        read_key(str(binary))
    with pytest.raises(ConfigError, match="mass keygen"):
        read_key(str(tmp_path / "missing"))
    # where the system refuses the new file (here a path through a missing directory that
    # `..` hides from the parent check): named, not an OSError traceback
    with pytest.raises(ConfigError, match="cannot create a key file there"):
        write_key(str(tmp_path / "nodir" / ".." / "k.key"))
    monkeypatch.delenv("MASS_NOISE_KEY_FILE", raising=False)
    assert resolve_key(None, "MASS_NOISE_KEY_FILE") is None
    write_key(str(tmp_path / "env"))
    monkeypatch.setenv("MASS_NOISE_KEY_FILE", str(tmp_path / "env"))
    assert resolve_key(None, "MASS_NOISE_KEY_FILE").source == str(tmp_path / "env")


def test_keyed_seeds_depend_on_the_key_and_not_only_the_id():
    ids = pa.array(np.arange(10_000, dtype=np.int64))
    a, b = OwnerKey(b"\x01" * 32), OwnerKey(b"\x02" * 32)
    sa, sb = keyed_row_seeds(ids, a), keyed_row_seeds(ids, b)
    assert sa.dtype == np.int64 and (sa >= 0).all() and (sa < 2**62).all()
    np.testing.assert_array_equal(sa, keyed_row_seeds(ids, a))  # reproducible with the key
    assert (sa != sb).mean() > 0.999  # another key, other seeds
    assert (sa != row_seeds(ids)).mean() > 0.999  # not the public seed
    assert len(np.unique(sa)) == len(sa)
    # bits look uniform: each of the 62 bits set about half the time
    bits = (sa[:, None] >> np.arange(62)) & 1
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.03)


def test_keyed_seeds_of_string_and_numpy_ids():
    key = OwnerKey(b"\x07" * 32)
    s = keyed_row_seeds(pa.array(["a", "b", "a"]), key)
    assert s[0] == s[2] != s[1]
    np.testing.assert_array_equal(
        keyed_row_seeds(np.arange(5), key), keyed_row_seeds(pa.array(np.arange(5)), key)
    )


def test_subkeys_are_separated_by_purpose():
    key = OwnerKey(b"\x03" * 32)
    assert key.subkey("noise") != key.subkey("sign")
    tag = key.mac("sign", b"data")
    assert key.verify("sign", b"data", tag)
    assert not key.verify("sign", b"datb", tag)
    assert not OwnerKey(b"\x04" * 32).verify("sign", b"data", tag)


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        (bytes(32), "all 32 bytes are 0x00"),
        (b"\xff" * 32, "all 32 bytes are 0xff"),
        (bytes.fromhex("deadbeef") * 8, "only 4 distinct byte values"),
        (bytes(range(32)), "an arithmetic run"),
        (bytes(range(100, 228, 4)), "an arithmetic run"),
        (b"Tr0ub4dor&3 quick-jumping ZEBRAS", "printable text"),
    ],
)
def test_weak_keys_are_refused_by_name(tmp_path, key_file_of, secret, why):
    path = key_file_of(tmp_path / "weak.key", secret)
    with pytest.raises(ConfigError, match=rf"^{path}: not a random key \({why}.*mass keygen"):
        read_key(path)


def test_random_keys_pass_the_weak_key_checks():
    from mass.keys import weak_reason

    assert not [k for k in (os.urandom(32) for _ in range(20_000)) if weak_reason(k)]


def test_a_symlinked_key_file_is_refused(tmp_path):
    real = tmp_path / "owner.key"
    write_key(str(real))
    link = tmp_path / "link.key"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match=rf"^{link}: a symlink \(to {real}\).*real file"):
        read_key(str(link))
    assert read_key(str(real)).source == str(real)  # the file itself is fine


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_key_file_owned_by_another_user_is_refused(tmp_path):
    path = tmp_path / "owner.key"
    write_key(str(path))
    os.chown(path, 54321, -1)
    with pytest.raises(ConfigError, match=rf"^{path}: key file is owned by uid 54321, not by you"):
        read_key(str(path))
    os.chown(path, os.geteuid(), -1)
    read_key(str(path))


def test_local_config_names_the_key_path_after_flag_and_env(tmp_path, monkeypatch):
    # `make demo` writes .mass/local.yaml so `dvc repro` from a plain shell finds the key
    from mass.keys import NOISE_KEY_ENV, SIGNING_KEY_ENV, key_file

    (tmp_path / ".mass").mkdir()
    key = write_key(str(tmp_path / ".mass" / "owner.key"))
    (tmp_path / ".mass" / "local.yaml").write_text(
        "noise_key_file: .mass/owner.key\nsigning_key_file: .mass/owner.key\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MASS_LOCAL_CONFIG")
    monkeypatch.delenv(NOISE_KEY_ENV)
    monkeypatch.delenv(SIGNING_KEY_ENV)
    for env in (NOISE_KEY_ENV, SIGNING_KEY_ENV):
        assert resolve_key(None, env).fingerprint == key.fingerprint
    other = write_key(str(tmp_path / "other.key"))
    monkeypatch.setenv(NOISE_KEY_ENV, str(tmp_path / "other.key"))  # the environment wins
    assert resolve_key(None, NOISE_KEY_ENV).fingerprint == other.fingerprint
    assert key_file("given.key", NOISE_KEY_ENV) == "given.key"  # and the flag wins over both
    monkeypatch.setenv("MASS_LOCAL_CONFIG", "")  # "" reads no local config
    assert resolve_key(None, SIGNING_KEY_ENV) is None


def test_local_config_naming_a_missing_key_is_refused_naming_both(tmp_path, monkeypatch):
    from mass.keys import NOISE_KEY_ENV

    (tmp_path / ".mass").mkdir()
    (tmp_path / ".mass" / "local.yaml").write_text("noise_key_file: gone.key\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MASS_LOCAL_CONFIG")
    monkeypatch.delenv(NOISE_KEY_ENV)
    named = r"gone.key: no such key file \(named by noise_key_file in .*local.yaml\)"
    with pytest.raises(ConfigError, match=named):
        resolve_key(None, NOISE_KEY_ENV)
    (tmp_path / ".mass" / "local.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match="local.yaml: expected a mapping"):
        resolve_key(None, NOISE_KEY_ENV)
