"""Build contexts as deterministic tar archives: sorted names, zero times, root owner, fixed modes.

The same files give the same bytes, so a context's sha256 names what an image was built from.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Mapping


def context_tar(files: Mapping[str, bytes]) -> bytes:
    """A tar of `files` (archive path -> bytes); every file 0644, every folder 0755, owned by root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders: set[str] = set()
        for name in sorted(files):
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                folder = "/".join(parts[:i])
                if folder not in folders:
                    folders.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


def digest(files: Mapping[str, bytes]) -> str:
    """sha256 over the names and bytes of `files`, in name order."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()
