"""Where a data set lives: a path on this machine or a URI (s3://, gs://, https://, ...),
read through one small interface, so that parity.data.read reads both alike, and a Ray
worker reads its shard from the bucket itself with the worker's own credentials (no
filesystem shared with the driver, parity.sources.data_ray).

A URI is opened by fsspec (parity.files.uris.filesystem: a fresh filesystem, the package for
its scheme) and shown only redacted. A file a reader needs at a path (a folder's sample, for
--preprocess or the model's own processor) is streamed into a private temporary folder first,
at most MAX_FILE bytes (the object's stated size checked before, the bytes while read), and
removed after. What the storage raises is one line naming the flag and the URI.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from parity.errors import InputError, ParityError, StorageError, UsageError, first_line
from parity.files.ship import MAX_FILE
from parity.files.uris import filesystem, is_uri, redacted_text, redacted_uri
from parity.limits.budget import format_size

_CHUNK = 1 << 20  # bytes copied at a time from an object to a local file


@dataclass(frozen=True)
class Storage:
    """A file or folder as given (`given`), on this machine (`fs` None) or at `root` in an
    fsspec filesystem. `rel`: a file inside the folder, as a POSIX path ("": itself)."""

    given: str
    flag: str = "--data"
    fs: Any = None
    root: str = ""

    @classmethod
    def of(cls, given: str, flag: str = "--data") -> Storage:
        """StorageError (one line) for a URI no installed package reads."""
        if not is_uri(given):
            return cls(given, flag)
        try:
            fs, root = filesystem(given)
        except StorageError as exc:
            raise StorageError(f"{flag} {exc.message}") from None
        return cls(given, flag, fs, root.rstrip("/") or root)

    @property
    def remote(self) -> bool:
        return self.fs is not None

    @property
    def shown(self) -> str:
        """How messages and reports name it: a path as Path writes it, a URI redacted."""
        return redacted_uri(self.given) if self.remote else str(Path(self.given))

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.root).suffix if self.remote else Path(self.given).suffix

    def shown_of(self, rel: str) -> str:
        """How messages name the file `rel` of the folder: its path, or its URI redacted."""
        if not self.remote:
            return str(Path(self.given) / rel)
        return redacted_uri(f"{self.given.rstrip('/')}/{rel}")

    def where(self, rel: str = "") -> str:
        """The path (in the filesystem, or on this machine) of `rel`."""
        if self.remote:
            return f"{self.root}/{rel}" if rel else self.root
        return str(Path(self.given) / rel) if rel else self.given

    def exists(self) -> bool:
        if not self.remote:
            return Path(self.given).exists()
        with self.said():
            return bool(self.fs.exists(self.root))

    def is_dir(self, rel: str = "") -> bool:
        if not self.remote:
            return Path(self.where(rel)).is_dir()
        with self.said(rel):
            return bool(self.fs.isdir(self.where(rel)))

    def is_file(self, rel: str = "") -> bool:
        if not self.remote:
            return Path(self.where(rel)).is_file()
        with self.said(rel):
            return bool(self.fs.isfile(self.where(rel)))

    def open(self, rel: str = "") -> IO[bytes]:
        """`rel` opened for reading, seekable (an object is read by ranges as it is asked)."""
        if not self.remote:
            return open(self.where(rel), "rb")  # noqa: SIM115 - the caller closes it
        with self.said(rel):
            return self.fs.open(self.where(rel), "rb")

    def files(self) -> list[PurePosixPath]:
        """Every file under the folder, relative, sorted; hidden files and folders
        (".ipynb_checkpoints") are not samples."""
        if not self.remote:
            root = Path(self.given)
            found = []
            for folder, dirs, names in os.walk(root):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                rel = Path(folder).relative_to(root)
                found += [PurePosixPath((rel / n).as_posix()) for n in names if n[0] != "."]
            return sorted(found)
        with self.said():
            keys = self.fs.find(self.root)
        prefix = self.root.rstrip("/") + "/"
        rels = [PurePosixPath(k[len(prefix) :]) for k in keys if k.startswith(prefix)]
        return sorted(r for r in rels if r.parts and not any(p[0] == "." for p in r.parts))

    @contextlib.contextmanager
    def local(self, rel: str = "") -> Iterator[str]:
        """A path on this machine holding `rel`'s bytes: its own path, or (an object) a
        private copy under its own name, removed after."""
        if not self.remote:
            yield self.where(rel)
            return
        name = PurePosixPath(rel or self.root).name or "file"
        with tempfile.TemporaryDirectory(prefix="parity-data-") as tmp:
            target = Path(tmp) / name
            self.copy(rel, target)
            yield str(target)

    def copy(self, rel: str, target: Path) -> None:
        """`rel`'s bytes into the new file `target`, at most MAX_FILE of them."""
        where = self.where(rel)
        with self.said(rel):
            size = self.fs.size(where)
        if isinstance(size, int) and size > MAX_FILE:
            raise UsageError(f"{self.named(rel)}: {format_size(size)}, larger than "
                             f"{format_size(MAX_FILE)}, not read")  # fmt: skip
        total = 0
        with self.open(rel) as fh, open(target, "xb") as out:
            while True:
                with self.said(rel):
                    chunk = fh.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > MAX_FILE:
                    raise UsageError(f"{self.named(rel)}: larger than {format_size(MAX_FILE)}")
                out.write(chunk)

    def named(self, rel: str = "") -> str:
        """'--data s3://b/images' or '--data s3://b/images (cat/1.png)'."""
        return f"{self.flag} {self.shown}" + (f" ({rel})" if rel else "")

    @contextlib.contextmanager
    def said(self, rel: str = "") -> Iterator[None]:
        """What the storage raised, as one line naming the flag and the URI (redacted):
        InputError for a missing object, StorageError for anything else (refused,
        unreachable), neither kept as the other's cause."""
        try:
            yield
        except ParityError:
            raise
        except FileNotFoundError:
            raise InputError(f"{self.named(rel)}: no such file or folder") from None
        except Exception as exc:  # every filesystem raises its own: the words are what matter
            said = redacted_text(first_line(exc))
            raise StorageError(
                f"{self.named(rel)}: cannot be read: {type(exc).__name__}: {said}"
            ) from None
