"""The blob store's files with nothing but ``os``: where a key lives, and reading, writing, deleting it.

Why a module of its own: the task runner does these in a fresh interpreter before and after the
user's function on every attempt (a container task has no warm process to fork from), often under
a fraction of a core, and ``storage`` (pathlib, dataclasses, tempfile, the log store) cost ~20 ms
of CPU to import there. ``storage.BlobStore`` is built on these functions, so the layout and the
write protocol have one implementation.

Keys come partly from users (job ids and names may hold ``..``, ``/``, NUL or shell
metacharacters), so every key component is percent-encoded before it touches the filesystem
(anything outside ``[A-Za-z0-9._-]``, plus the components ``.`` and ``..``); the resolved path is
then checked to lie under the store root as a second line of defence. The encoding is injective,
so distinct keys never share a file.
"""

# pathlib is one of the imports this module exists to avoid: paths here are strings, through os.
# ruff: noqa: PTH103, PTH105, PTH108, PTH118, PTH120, SIM105

from __future__ import annotations

import os

__all__ = [
    "BlobNotFoundError",
    "StorageError",
    "blob_path",
    "contained_path",
    "delete_blob",
    "encode_component",
    "read_blob",
    "split_key",
    "store_root",
    "write_blob",
]

_SAFE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
# Filesystems cap a name at 255 bytes; longer encoded components are shortened with a digest.
_MAX_COMPONENT_CHARS = 200
_DIGEST_CHARS = 32
BLOB_FILE_MODE = 0o644
_TEMP_TRIES = 100


class StorageError(Exception):
    """A store could not perform an operation (I/O failure, bad layout, key outside the root)."""


class BlobNotFoundError(StorageError, LookupError):
    """The requested blob does not exist; carries the key and the path that was looked at."""

    def __init__(self, key: str, path: os.PathLike[str] | str) -> None:
        super().__init__(f"blob {key!r} is missing: no file at {os.fspath(path)}")
        self.key = key
        self.path = path


def store_root(url: str) -> str:
    """The root directory of a store URL (``file:///abs/path`` or a plain absolute path).

    Any other scheme is rejected by name, so a typo such as ``gcs://`` fails at construction
    rather than as a confusing file-not-found later.
    """
    if url.startswith("/"):
        return url
    if url.startswith("file:///") and not any(char in url for char in "%?#"):
        return url[len("file://") :]  # what Path.as_uri() writes for a plain path: nothing to decode
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file store URL {url!r} names host {parts.netloc!r}; only local paths work")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise ValueError(f"file store URL {url!r} must hold an absolute path")
        return path
    if parts.scheme:
        raise ValueError(
            f"unsupported store URL scheme {parts.scheme!r} in {url!r}; use file:///abs/path or an absolute path"
        )
    raise ValueError(f"store URL {url!r} must be file:///abs/path or an absolute path")


def encode_component(component: str) -> str:
    """Encode one key component into a file name that cannot escape or alias another component.

    Percent-encodes (UTF-8) every character outside ``[A-Za-z0-9._-]`` (so ``%`` itself is always
    encoded, which keeps the mapping injective), spells ``.`` and ``..`` as ``%2E`` runs, and
    shortens names longer than the filesystem allows with a SHA-256 digest after a ``~`` (a
    character no encoded name otherwise contains).
    """
    if not component:
        raise ValueError("key components must be non-empty")
    pieces: list[str] = []
    for char in component:
        if char in _SAFE_CHARS:
            pieces.append(char)
        else:
            pieces.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    encoded = "".join(pieces)
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    if len(encoded) > _MAX_COMPONENT_CHARS:
        import hashlib  # only for names this long: its OpenSSL binding is slow to load

        digest = hashlib.sha256(encoded.encode("ascii")).hexdigest()[:_DIGEST_CHARS]
        encoded = f"{encoded[: _MAX_COMPONENT_CHARS - _DIGEST_CHARS - 1]}~{digest}"
    return encoded


def split_key(key: str) -> list[str]:
    """The encoded file-name components of a ``/``-separated key; ValueError if one is empty."""
    if not isinstance(key, str):
        raise TypeError(f"store keys are str, got {type(key).__name__}")
    components = key.split("/")
    if any(not component for component in components):
        raise ValueError(f"invalid key {key!r}: empty path component (leading, trailing or doubled '/')")
    return [encode_component(component) for component in components]


def contained_path(root: str, components: list[str], what: str) -> str:
    """``components`` joined under ``root``; StorageError if the resolved path leaves the root (a symlink)."""
    path = os.path.join(root, *components)
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise StorageError(f"{what} resolves outside the store root {root} (a symlink?)")
    return path


def blob_path(root: str, key: str) -> str:
    """The file that holds ``key`` in the store rooted at ``root`` (it may not exist)."""
    return contained_path(root, split_key(key), f"blob key {key!r}")


def read_blob(path: str, key: str) -> bytes:
    """The bytes of the blob ``key`` at ``path``; BlobNotFoundError if there is none."""
    try:
        with open(path, "rb") as blob:
            return blob.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise BlobNotFoundError(key, path) from None
    except OSError as exc:
        raise StorageError(f"cannot read blob {key!r} at {path}: {exc.strerror or exc}") from exc


def write_blob(path: str, key: str, data: bytes, *, durable: bool) -> None:
    """Store ``data`` at ``path`` atomically: a temporary file beside it, fsync'd if ``durable``, renamed."""
    try:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        for _ in range(_TEMP_TRIES):
            temporary = os.path.join(directory, f".tmp-{os.urandom(6).hex()}.partial")
            try:
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"no free temporary name in {directory}")
        try:
            with open(fd, "wb") as blob:
                blob.write(data)
                blob.flush()
                os.fchmod(fd, BLOB_FILE_MODE)
                if durable:
                    os.fsync(fd)
            os.replace(temporary, path)
        except BaseException:
            try:  # not contextlib.suppress: contextlib is another import this module avoids
                os.unlink(temporary)
            except OSError:
                pass
            raise
    except OSError as exc:
        raise StorageError(f"cannot store blob {key!r} at {path}: {exc.strerror or exc}") from exc


def delete_blob(path: str, key: str) -> None:
    """Remove the blob ``key`` at ``path``; a missing blob is not an error (idempotent)."""
    try:
        os.unlink(path)
    except (FileNotFoundError, IsADirectoryError):
        return
    except OSError as exc:
        raise StorageError(f"cannot delete blob {key!r} at {path}: {exc.strerror or exc}") from exc
