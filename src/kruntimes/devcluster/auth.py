"""Who a bearer token is, and what a user may do: the dev cluster's authenticator and authorizer.

Both read kube-apiserver's own file formats, so a setup written for the dev cluster works
against a real server started with the same files:

- ``--token-auth-file``: CSV lines ``token,user,uid[,"group1,group2"]`` (kube-apiserver's
  static token file). Every such user is also in ``system:authenticated``.
- ``--authorization-policy-file``: one ABAC ``Policy`` JSON object per line
  (``abac.authorization.kubernetes.io/v1beta1``), e.g. ``{"apiVersion": ...,
  "kind": "Policy", "spec": {"user": "prometheus", "nonResourcePath": "/metrics",
  "readonly": true}}``.

The ``--token`` token is the cluster's administrator, ``devcluster-admin`` in
``system:masters``, which kube-apiserver always allows whatever its other authorizers say.
These answer ``TokenReview`` and ``SubjectAccessReview`` requests (``devcluster/reviews.py``);
the dev cluster's own requests are authenticated against the same tokens but not authorized
(docs/devcluster.md, "What still differs").
"""

from __future__ import annotations

import csv
import hmac
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, final

ADMIN_USER: Final = "devcluster-admin"
MASTERS: Final = "system:masters"
AUTHENTICATED: Final = "system:authenticated"
POLICY_API_VERSION: Final = "abac.authorization.kubernetes.io/v1beta1"
READ_ONLY_VERBS: Final = frozenset({"get", "list", "watch"})
"""ABAC's ``readonly: true`` (apiserver's ``IsReadOnly``)."""


class AuthFileError(ValueError):
    """A token or policy file that kube-apiserver would refuse at start-up; the message names the line."""


@final
@dataclass(frozen=True, slots=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        return out


ADMIN: Final = User(ADMIN_USER, "", (MASTERS, AUTHENTICATED))


@final
@dataclass(frozen=True, slots=True)
class Attributes:
    """What a SubjectAccessReview asks: a user and one request, resource or non-resource."""

    user: str
    groups: tuple[str, ...]
    verb: str
    path: str = ""
    """Set for a non-resource request (``/metrics``); empty for a resource request."""
    group: str = ""
    resource: str = ""
    namespace: str = ""

    @property
    def non_resource(self) -> bool:
        return bool(self.path)


@final
@dataclass(frozen=True, slots=True)
class Policy:
    """One ABAC policy line's ``spec``; "" means the field was not given."""

    user: str = ""
    group: str = ""
    readonly: bool = False
    api_group: str = ""
    namespace: str = ""
    resource: str = ""
    non_resource_path: str = ""

    def matches(self, a: Attributes) -> bool:
        return self._subject(a) and self._verb(a) and (self._non_resource(a) if a.non_resource else self._resource(a))

    def _subject(self, a: Attributes) -> bool:
        if self.user and (self.user == "*" or self.user == a.user):
            return True
        return bool(self.group) and (self.group == "*" or self.group in a.groups)

    def _verb(self, a: Attributes) -> bool:
        return not self.readonly or a.verb in READ_ONLY_VERBS

    def _non_resource(self, a: Attributes) -> bool:
        path = self.non_resource_path
        if not path:
            return False
        if path == "*" or path == a.path:
            return True
        return path.endswith("*") and a.path.startswith(path[:-1])

    def _resource(self, a: Attributes) -> bool:
        # A policy naming only a non-resource path grants no resource (kube's ABAC reads unset as no match).
        return (
            self.namespace in ("*", a.namespace)
            and self.resource in ("*", a.resource)
            and self.api_group in ("*", a.group)
        )


@final
@dataclass(frozen=True, slots=True)
class Authorizer:
    """The tokens and the policy of one dev cluster."""

    admin_token: str | None = None
    tokens: Mapping[str, User] = field(default_factory=dict)
    policy: tuple[Policy, ...] = ()

    @property
    def enabled(self) -> bool:
        """Requests must carry a known token (otherwise everyone is the administrator, as before)."""
        return self.admin_token is not None or bool(self.tokens)

    def authenticate(self, token: str) -> User | None:
        if not token:
            return None
        if self.admin_token is not None and hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return ADMIN
        return self.tokens.get(token)

    def authorize(self, a: Attributes) -> tuple[bool, str]:
        """``(allowed, reason)``, kube-apiserver's union: ``system:masters`` first, then the policy."""
        if MASTERS in a.groups:
            return True, ""
        if any(p.matches(a) for p in self.policy):
            return True, ""
        return False, "no policy matched"


def parse_token_file(text: str) -> dict[str, User]:
    """kube-apiserver's ``--token-auth-file``: ``token,user,uid[,"group1,group2"]`` per line."""
    out: dict[str, User] = {}
    for number, record in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if len(record) < 3:
            raise AuthFileError(f"token file line {number}: expected token,user,uid[,groups], got {len(record)} column(s)")
        token, name, uid = (c.strip() for c in record[:3])
        if not token or not name:
            raise AuthFileError(f"token file line {number}: the token and the user name must not be empty")
        if token in out:
            raise AuthFileError(f"token file line {number}: the token is listed twice")
        groups = tuple(g.strip() for g in record[3].split(",") if g.strip()) if len(record) > 3 else ()
        out[token] = User(name, uid, (*groups, AUTHENTICATED))
    return out


_SPEC_FIELDS: Final = {
    "user": "user",
    "group": "group",
    "apiGroup": "api_group",
    "namespace": "namespace",
    "resource": "resource",
    "nonResourcePath": "non_resource_path",
}


def parse_policy_file(text: str) -> tuple[Policy, ...]:
    """kube-apiserver's ABAC ``--authorization-policy-file``: one Policy object per line (``#`` comments)."""
    out: list[Policy] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            doc = json.loads(stripped)
        except ValueError as problem:
            raise AuthFileError(f"policy file line {number}: not JSON: {problem}") from None
        if not isinstance(doc, dict) or doc.get("apiVersion") != POLICY_API_VERSION or doc.get("kind") != "Policy":
            raise AuthFileError(f"policy file line {number}: expected apiVersion {POLICY_API_VERSION} and kind Policy")
        spec = doc.get("spec")
        if not isinstance(spec, dict):
            raise AuthFileError(f"policy file line {number}: spec must be an object")
        values: dict[str, str] = {}
        for key, attribute in _SPEC_FIELDS.items():
            value = spec.get(key, "")
            if not isinstance(value, str):
                raise AuthFileError(f"policy file line {number}: spec.{key} must be a string")
            values[attribute] = value
        readonly = spec.get("readonly", False)
        if not isinstance(readonly, bool):
            raise AuthFileError(f"policy file line {number}: spec.readonly must be true or false")
        unknown = set(spec) - set(_SPEC_FIELDS) - {"readonly"}
        if unknown:
            raise AuthFileError(f"policy file line {number}: unknown field(s) spec.{', spec.'.join(sorted(unknown))}")
        out.append(Policy(readonly=readonly, **values))
    return tuple(out)
