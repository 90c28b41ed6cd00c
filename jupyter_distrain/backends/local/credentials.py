"""Git credentials as files under the storage root (<root>/secrets/<name>.json, mode 0600), each for its
owner; never read back to a request."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from ...errors import FieldError, SpecError, StorageFull
from .storage_root import StorageRoot


class CredentialStore(StorageRoot):
    """Stores, lists and deletes an owner's git credentials."""

    def _secret_file(self, secret: str) -> Path:
        return self.root / "secrets" / f"{secret}.json"

    def _stored(self, secret: str) -> dict | None:
        """The stored secret, if this owner sees it (theirs, or stored before secrets had owners)."""
        try:
            stored = {"owner": "", "host": "", **json.loads(self._secret_file(secret).read_text())}
        except FileNotFoundError:
            return None
        return stored if self.visible(stored) else None

    def credentials(self, secret: str) -> dict:
        stored = self._stored(secret)
        if stored is None:
            raise SpecError([FieldError("code.credentials", f"no secret named {secret!r} of yours (create it with "
                                                            f"'distrain secret set {secret} --host HOST')")])
        return {key: stored[key] for key in ("username", "password", "host")}

    def set_credentials(self, secret: str, username: str, password: str, host: str) -> None:
        """Store the secret, or replace one of this owner's; another owner's name is refused."""
        path = self._secret_file(secret)
        if path.exists() and self._stored(secret) is None:
            raise SpecError([FieldError("name", f"{secret!r} is another user's secret; choose another name")],
                            subject="credentials")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"username": username, "password": password, "host": host, "owner": self.owner}, f)
        except OSError as e:
            path.unlink(missing_ok=True)  # no secret half written
            if e.errno == errno.ENOSPC:
                raise StorageFull(f"secret {secret!r} was not stored: the disk holding {path.parent} is full") from None
            raise

    def credential_names(self) -> list[str]:
        return [path.stem for path in (self.root / "secrets").glob("*.json") if self._stored(path.stem)]

    def delete_credentials(self, secret: str) -> None:
        if self._stored(secret) is not None:
            self._secret_file(secret).unlink(missing_ok=True)
