"""Which addresses in a knowledge base's answers may stay clickable links: its allow list of hosts.

Documents, FAQs and the models quoting them are written by others, so a link in an answer is shown
as text with its whole address unless its host is on the knowledge base's list (set by its
publishers). An entry is a host name (`docs.example.com`, matched exactly) or `*.example.com`
(any host below example.com, not example.com itself). Only `http:`, `https:` and `mailto:`
addresses can be allowed, and only when their host is plainly written: an address with a user
part (`http://allowed@evil/`), a backslash, an escaped or non-ASCII host, or a port-less oddity a
browser reads differently from us is never allowed, whatever the list says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_ENTRY = re.compile(rf"(?:\*\.)?{_LABEL}(?:\.{_LABEL})+|{_LABEL}")
# Each form of address, strictly: its host plainly written (letters, digits, dots, hyphens), an
# optional port, then nothing but a path, query or fragment. Anything else is not ours to vouch for.
_TAIL = r"(?::\d{1,5})?(?:[/?#][!#-;=?-~]*)?"
_FORMS = (
    (re.compile(rf"(?i)https?://(?P<host>[a-z0-9.-]+){_TAIL}"), ""),
    (re.compile(r"(?i)mailto:[a-z0-9._%+-]+@(?P<host>[a-z0-9.-]+)(?:\?[!#-;=?-~]*)?"), ""),
    (re.compile(rf"(?i)(?P<host>www\.[a-z0-9.-]+){_TAIL}"), "http://"),
    (re.compile(r"(?i)[a-z0-9._%+-]+@(?P<host>[a-z0-9.-]+)"), "mailto:"),
)


def parse_link_hosts(text: str) -> tuple[str, ...]:
    """The entries of a stored allow list (one per line), as they are matched."""
    return tuple(dict.fromkeys(line.strip().lower() for line in (text or "").splitlines() if line.strip()))


def normalise_link_hosts(entries: Iterable[str]) -> str:
    """Entries as stored (one per line, lower case, no duplicates); ValidationError naming the
    first entry that is not a host name or `*.` + a host name."""
    cleaned = []
    for entry in entries:
        value = entry.strip().lower()
        if not value:
            continue
        if not _ENTRY.fullmatch(value):
            raise ValidationError(
                _("“%(entry)s”不是域名：每行一个域名（如 docs.example.com），或 *.example.com 表示其下所有子域名。")
                % {"entry": entry.strip()[:100]},
                code="invalid_link_host",
            )
        cleaned.append(value)
    return "\n".join(dict.fromkeys(cleaned))


def validate_link_hosts(text: str) -> None:
    normalise_link_hosts((text or "").splitlines())


def host_allowed(host: str, hosts: Iterable[str]) -> bool:
    host = host.lower().rstrip(".")
    if not _HOST.fullmatch(host):
        return False
    for entry in hosts:
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and host != entry[2:]:
                return True
        elif host == entry:
            return True
    return False


def allowed_href(address: str, hosts: Iterable[str]) -> str | None:
    """The link target of `address` as written in an answer (`https://…`, `mailto:…`, a bare
    `www.…` or e-mail address) when its host is allowed; None when it must stay text."""
    hosts = tuple(hosts)
    if not hosts:
        return None
    for pattern, prefix in _FORMS:
        match = pattern.fullmatch(address)
        if match is not None:
            return prefix + address if host_allowed(match.group("host"), hosts) else None
    return None
