"""Git credentials as files under the storage root (<root>/secrets/<name>.json, mode 0600), each for its
owner; never read back to a request."""

from __future__ import annotations

from pathlib import Path

from ...errors import FieldError, SpecError
from ...private import read_private, write_private
from .storage_root import StorageRoot


class CredentialStore(StorageRoot):
    """Stores, lists and deletes an owner's git credentials."""

    def _secret_file(self, secret: str) -> Path:
        return self.root / "secrets" / f"{secret}.json"

    def _stored(self, secret: str) -> dict | None:
        """The stored secret, if this owner sees it (theirs, or stored before secrets had owners)."""
        found = read_private(self._secret_file(secret))
        if found is None:
            return None
        stored = {"owner": "", "host": "", **found}
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
        write_private(path, {"username": username, "password": password, "host": host, "owner": self.owner},
                      f"secret {secret!r}")

    def credential_names(self) -> list[str]:
        return [path.stem for path in (self.root / "secrets").glob("*.json") if self._stored(path.stem)]

    def delete_credentials(self, secret: str) -> None:
        if self._stored(secret) is not None:
            self._secret_file(secret).unlink(missing_ok=True)
