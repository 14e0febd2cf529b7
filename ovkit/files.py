"""A file a user names, read safely: a regular file only, of bounded size (a directory, ``/dev/zero``
or a FIFO is one clear error).  It is opened without blocking, checked on the open descriptor (no
race with a rename), and at most the bound is read."""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
from pathlib import Path

from ovkit.errors import OvkitError

MIB = 1 << 20

#: File kinds named in the error for what is not a regular file.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileReadError(OvkitError, ValueError):
    """A file that cannot be read as asked: missing, not a regular file, too large or not text."""


def _size(n: int) -> str:
    return f"{n / MIB:,.1f} MiB" if n >= MIB else f"{n:,} bytes"


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (``.gz`` decompressed) up to ``max_bytes``, else a
    :class:`FileReadError` (``what`` names what it should hold)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileReadError(f"{path}: no such file (expected {what})") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO opened for writing) cannot be opened
            raise FileReadError(f"{path}: not a regular file (expected {what})") from None
        raise FileReadError(f"{path}: cannot open it ({exc.strerror}; expected {what})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "a special file")
            raise FileReadError(f"{path}: is {kind}, not a regular file (expected {what})")
        if info.st_size > max_bytes:
            raise FileReadError(
                f"{path}: {_size(info.st_size)} is more than the {_size(max_bytes)} {what} may take"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(max_bytes + 1)  # a file growing while read stops at the bound all the same
    except OSError as exc:
        raise FileReadError(f"{path}: cannot read it ({exc.strerror}; expected {what})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise FileReadError(f"{path}: more than the {_size(max_bytes)} {what} may take")
    if Path(path).suffix == ".gz":  # decompressed within the same bound (no gzip bomb)
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as z:
                data = z.read(max_bytes + 1)
        except (OSError, EOFError) as exc:
            raise FileReadError(f"{path}: not a readable gzip file ({exc}; expected {what})") from None
        if len(data) > max_bytes:
            raise FileReadError(f"{path}: decompressed, more than the {_size(max_bytes)} {what} may take")
    return data


def read_text(path: str | os.PathLike[str], *, max_bytes: int, what: str) -> str:
    """:func:`read_bytes` decoded as UTF-8 (the error names the file and the first bad byte's offset)."""
    data = read_bytes(path, max_bytes=max_bytes, what=what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileReadError(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}; expected {what})"
        ) from None
