"""The release home: what a published release is and how it is committed (no Beam).

* :mod:`.format` - the names: part files, the ``_release.json`` / ``_quarantine.json``
  markers and their format tags, the ``_versions/`` prefix and the pointer on object stores;
* :mod:`.manifest` - the manifest in the marker (parts with rows and sha256, audit, provenance);
* :mod:`.columns` - which columns a release may hold, and the ``mass.*`` metadata of every part;
* :mod:`.commit` - where a release is committed: ownership checks, staging, crash recovery,
  the swap on local disk, the versioned prefix + pointer on object stores;
* :mod:`.publish` - fail-closed publication: verify the staged release, run the gate, commit.
"""
