"""Digests equal their documented constructions, computed here from hashlib alone (issue 37):
the served code's digest (mass/digest.py ``code_sha256``) and the fit rows' ids digest
(mass/fitrows.py ``ids_digest``, integers)."""

from __future__ import annotations

import hashlib
import struct

import pyarrow as pa

from mass.digest import code_sha256, sha256_file
from mass.fitrows import ids_digest


def test_code_digest_is_the_sorted_path_nul_sha256_lines(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__pycache__").mkdir()
    (pkg / "b.py").write_text("B = 2\n")
    (pkg / "sub" / "a.py").write_text("A = 1\n")
    (pkg / "notes.txt").write_text("not code\n")
    (pkg / "__pycache__" / "c.py").write_text("never counted\n")
    lines = b"".join(
        f"{rel}\0{hashlib.sha256(text.encode()).hexdigest()}\n".encode()
        for rel, text in (("b.py", "B = 2\n"), ("sub/a.py", "A = 1\n"))
    )
    assert code_sha256(pkg) == hashlib.sha256(lines).hexdigest()
    assert sha256_file(pkg / "b.py") == hashlib.sha256(b"B = 2\n").hexdigest()


def test_integer_ids_digest_is_sha256_of_the_sorted_int64_little_endian():
    ref = hashlib.sha256(b"int64:" + struct.pack("<3q", -5, 2, 7)).hexdigest()
    assert ids_digest(pa.array([7, -5, 2], pa.int32())) == ref
    assert ids_digest(pa.chunked_array([[2], [7, -5]])) == ref
