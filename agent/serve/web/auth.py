"""Who may use the web page: one-time login codes, session cookies and CSRF tokens.

`agent web` asks the running serve for a login URL over the gateway's API (with the
bearer token only this user can read); serve makes a code, keeps its hash for
CODE_TTL seconds, and forgets it at its first use. Visiting the URL gives a session
cookie (HttpOnly, SameSite=Strict, named after the port so two vaults' pages on one
machine keep apart) and a CSRF token that every state-changing request must carry.
All of it lives in serve's memory: a restart logs every browser out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

CODE_TTL = 300.0            # seconds a login code may wait to be used
SESSION_TTL = 30 * 86400.0  # seconds a browser stays logged in (while serve runs)


def _hash(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass
class Login:
    sid: str
    csrf: str
    expires: float = field(default=0.0)


class Logins:
    """Codes waiting for their first use, and the browsers logged in."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._codes: dict[str, float] = {}
        self._logins: dict[str, Login] = {}
        self._lock = threading.Lock()

    def new_code(self) -> str:
        code = secrets.token_urlsafe(24)
        now = self.clock()
        with self._lock:
            self._codes = {h: t for h, t in self._codes.items() if t > now}
            self._codes[_hash(code)] = now + CODE_TTL
        return code

    def redeem(self, code: str | None) -> Login | None:
        """A new login for a code made here, unexpired and unused; None otherwise."""
        if not code:
            return None
        with self._lock:
            expires = self._codes.pop(_hash(code), None)
            if expires is None or expires <= self.clock():
                return None
            login = Login(secrets.token_urlsafe(32), secrets.token_urlsafe(32),
                          self.clock() + SESSION_TTL)
            self._logins[login.sid] = login
            return login

    def find(self, sid: str | None) -> Login | None:
        if not sid:
            return None
        with self._lock:
            login = self._logins.get(sid)
            if login is None:
                return None
            if login.expires <= self.clock():
                del self._logins[sid]
                return None
            return login


def csrf_ok(login: Login | None, given: str | None) -> bool:
    if login is None or not given:
        return False
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), login.csrf.encode())
