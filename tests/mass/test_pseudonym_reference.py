"""Pseudonymous ids equal the documented construction (mass/pseudonym.py, issue 37):
``HMAC-SHA256(subkey("release-ids"), canonical(id))``, first 128 bits as 32 hex digits, the
sub-key BLAKE2b keyed by the owner secret and personalised by its purpose (mass/keys.py).

The expected values are computed here from hashlib/hmac alone and pinned as literals, so a
pseudonym keyed by another sub-key (the signing one), an HMAC state carried from one id to the
next, or another canonical form fails, whatever ``pseudonymize`` agrees with itself about.
"""

from __future__ import annotations

import hashlib
import hmac

import pyarrow as pa
import pytest

from mass.keys import OwnerKey
from mass.pseudonym import pseudonymize

SECRET = bytes(range(1, 33))  # a fixed test secret (never a real key)


def _reference(secret: bytes, canonical: bytes) -> str:
    sub = hashlib.blake2b(b"", key=secret, person=b"release-ids", digest_size=32).digest()
    return hmac.new(sub, canonical, hashlib.sha256).hexdigest()[:32]


# (ids, their canonical forms, the pseudonyms pinned from the construction above)
VECTORS = [
    (pa.array([7, 7, -1], pa.int64()), [b"i:7", b"i:7", b"i:-1"],
     ["3317d9add139351381d1d850f9a51404", "3317d9add139351381d1d850f9a51404",
      "a42ced8c5cc1559c4999e3f8be8ad2ff"]),
    (pa.array(["7", "id/\u00e9"]), [b"s:7", "s:id/\u00e9".encode()],
     ["8023f68f502966e3ec8a748d49447955", "302ebd770cd22cc5f6735e150964ac01"]),
    (pa.array([b"\x00\xff"], pa.binary()), [b"b:\x00\xff"],
     ["420b5860b39c341bc5469fcd5a95d9cf"]),
]  # fmt: skip


@pytest.mark.parametrize(("ids", "canonical", "pinned"), VECTORS, ids=["int", "string", "binary"])
def test_pseudonyms_equal_the_documented_hmac_under_the_release_ids_subkey(ids, canonical,
                                                                           pinned):  # fmt: skip
    assert [_reference(SECRET, c) for c in canonical] == pinned  # the literals are the reference
    assert pseudonymize(ids, OwnerKey(SECRET, "<test>")).to_pylist() == pinned


def test_each_id_is_keyed_alone_whatever_came_before_it():
    """The same id gets the same pseudonym first, last, or after any other ids."""
    key = OwnerKey(SECRET, "<test>")
    alone = pseudonymize(pa.array([42]), key).to_pylist()
    after = pseudonymize(pa.array([1, 2, 3, 42]), key).to_pylist()
    assert after[-1] == alone[0] == _reference(SECRET, b"i:42")
    assert after[:3] == [_reference(SECRET, b"i:%d" % i) for i in (1, 2, 3)]


def test_the_key_fingerprint_equals_its_documented_construction():
    """16 hex digits: BLAKE2b of nothing, keyed by the secret, personalised 'fingerprint'."""
    ref = hashlib.blake2b(b"", key=SECRET, person=b"fingerprint", digest_size=8).hexdigest()
    assert ref == "82423389851ff3b3"
    assert OwnerKey(SECRET, "<test>").fingerprint == ref


@pytest.mark.parametrize("key_len", [0, 1, 32, 63, 64, 65, 200])
def test_the_keyed_states_give_the_hmac_of_any_key_length(key_len):
    """pseudonymize copies HMAC-SHA256's inner and outer states (RFC 2104) instead of an hmac
    object: the digest equals hmac's for keys shorter than, equal to and longer than a block."""
    from mass.pseudonym import _hmac_states

    key = bytes(range(key_len % 256)) * (key_len // 256 + 1)
    key = key[:key_len]
    for msg in (b"", b"i:7", b"s:" + b"x" * 300):
        inner, outer = _hmac_states(key)
        inner.update(msg)
        outer.update(inner.digest())
        assert outer.hexdigest() == hmac.new(key, msg, hashlib.sha256).hexdigest()
