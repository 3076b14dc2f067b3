"""Writing the dev cluster's kubeconfig, which carries its bearer token, where no other user can reach it.

A shared directory such as ``/tmp`` lets any local user plant a file or a symlink at a
name another will write: a predictable name there would have the token written through
the planted link, into a file of the planter's choosing. So the default kubeconfig lives
in a fresh directory only its owner can enter (``mkdtemp``: random name, mode 0700), and
every write creates its file exclusively without following a link (``O_CREAT | O_EXCL |
O_NOFOLLOW``, mode 0600). A path the user names (``--kubeconfig-out``) is replaced only
when it is a regular file of theirs that a dev cluster wrote; anything else is refused
with a reason, never followed and never overwritten.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Final, final

import yaml

CONTEXT_NAME: Final = "kruntimes-dev-cluster"
"""The kubeconfig's only cluster, user and context: how a file a dev cluster wrote is recognised."""
_TEMPORARY_PREFIX: Final = "kruntimes-dev-cluster-"
_FILE_NAME: Final = "kubeconfig"
_MAX_RECOGNISED_BYTES: Final = 64 * 1024
"""A dev cluster's kubeconfig is well under a kilobyte; a larger file is not one."""
_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_INSPECT_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""``O_NONBLOCK`` so that a FIFO planted at the path cannot hang the open."""


@final
class KubeconfigError(Exception):
    """The kubeconfig cannot be written where asked; the message says why and what to do."""


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, readable and writable by its owner only.

    A new file is created exclusively, never through a symlink. An existing ``path`` is
    replaced (atomically, by a rename in its directory) only when it is a regular file
    owned by this user whose only context is a dev cluster's; otherwise
    :class:`KubeconfigError`.
    """
    path = path.absolute()  # not resolve(): that would follow a planted symlink
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, _CREATE_FLAGS, 0o600)
    except FileExistsError:
        _check_replaceable(path)
        _replace(path, text)
        return path
    except OSError as exc:
        raise KubeconfigError(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def write_temporary(text: str) -> Path:
    """Write ``text`` as ``kubeconfig`` in a new private directory of the temp directory; returns its path."""
    directory = Path(tempfile.mkdtemp(prefix=_TEMPORARY_PREFIX))
    return write_private(directory / _FILE_NAME, text)


def remove_temporary(path: Path) -> None:
    """Remove what :func:`write_temporary` created: its file, then its directory if nothing else is in it."""
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def _check_replaceable(path: Path) -> None:
    try:
        fd = os.open(path, _INSPECT_FLAGS)
    except OSError as exc:
        if os.path.islink(path):
            raise KubeconfigError(f"{path} is a symbolic link; refusing to write the kubeconfig through it (remove it or choose another path)") from None
        raise KubeconfigError(f"{path} exists and cannot be read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KubeconfigError(f"{path} exists and is not a regular file; refusing to replace it")
        if info.st_uid != os.geteuid():
            raise KubeconfigError(f"{path} belongs to another user; refusing to replace it (choose another path)")
        if info.st_size > _MAX_RECOGNISED_BYTES or not _written_by_a_dev_cluster(os.read(fd, _MAX_RECOGNISED_BYTES)):
            raise KubeconfigError(f"{path} exists and is not a kubeconfig a dev cluster wrote; refusing to overwrite it (remove it or choose another path)")
    finally:
        os.close(fd)


def _written_by_a_dev_cluster(data: bytes) -> bool:
    try:
        doc = yaml.safe_load(data)
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return False
    if not isinstance(doc, dict) or doc.get("current-context") != CONTEXT_NAME:
        return False
    contexts = doc.get("contexts")
    return isinstance(contexts, list) and [c.get("name") if isinstance(c, dict) else None for c in contexts] == [CONTEXT_NAME]


def _replace(path: Path, text: str) -> None:
    # mkstemp creates with O_EXCL (and O_NOFOLLOW) and mode 0600; the rename swaps the
    # directory entry itself, so a link planted there meanwhile is replaced, not followed.
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise KubeconfigError(f"cannot write in {path.parent}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise KubeconfigError(f"cannot replace {path}: {exc.strerror}") from None
