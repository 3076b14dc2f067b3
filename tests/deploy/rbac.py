"""RBAC manifests as data: the permissions the scheduler's ServiceAccount is granted, as sets of tuples.

The manifests in ``deploy/`` are the single source of the intended rule set; these helpers read
them (as rendered by ``kubectl kustomize``) so tests can compare the grants with what the
scheduler actually calls, e.g. the requests the dev cluster records (``RequestInfo``: verb, group,
resource, subresource, namespace, name).

- :func:`rule_permissions` / :func:`role_permissions`: one rule or one (Cluster)Role as a set of
  :class:`Permission` ``(verb, group, resource, subresource)`` tuples.
- :func:`grants_for`: what a ServiceAccount gets through every (Cluster)RoleBinding of a rendered
  set, as :class:`Grant` values that add the scope (a namespace, or ``None`` for cluster-wide) and
  the ``resourceNames`` restriction.
- :func:`permissions`: the scope-free 4-tuples of those grants (what "the scheduler may do").
- :func:`allows`, :func:`uncovered`, :func:`unused`: check requests against grants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

SCHEDULER_SERVICE_ACCOUNT = ("kruntimes-system", "kruntimes-scheduler")


class Permission(NamedTuple):
    """One verb on one resource (``subresource`` is "" for the resource itself)."""

    verb: str
    group: str
    resource: str
    subresource: str


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """A permission with its scope: ``namespace`` None is every namespace; empty ``names`` is any name."""

    permission: Permission
    namespace: str | None
    names: frozenset[str] = frozenset()


class Request(Protocol):
    """What an authorizer sees of a request (the dev cluster's ``RequestInfo`` has these fields)."""

    @property
    def verb(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def subresource(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...


def _split(resource: str) -> tuple[str, str]:
    base, _, sub = resource.partition("/")
    return base, sub


def rule_permissions(rule: Mapping[str, Any]) -> frozenset[Permission]:
    """apiGroups x resources x verbs of one PolicyRule (no wildcards are expanded: they stay ``*``)."""
    assert "nonResourceURLs" not in rule, "the scheduler needs no non-resource URLs"
    return frozenset(
        Permission(str(verb), str(group), *_split(str(resource)))
        for group in rule.get("apiGroups", ())
        for resource in rule.get("resources", ())
        for verb in rule.get("verbs", ())
    )


def role_permissions(role: Mapping[str, Any]) -> frozenset[Permission]:
    out: set[Permission] = set()
    for rule in role.get("rules") or ():
        out |= rule_permissions(rule)
    return frozenset(out)


def _role_key(kind: str, name: str, namespace: str | None) -> tuple[str, str, str | None]:
    return (kind, name, namespace if kind == "Role" else None)


def grants_for(objects: Sequence[Mapping[str, Any]], service_account: tuple[str, str] = SCHEDULER_SERVICE_ACCOUNT) -> frozenset[Grant]:
    """Every grant the ServiceAccount ``(namespace, name)`` receives from the bindings in ``objects``.

    A RoleBinding scopes its role (Role or ClusterRole) to its own namespace; a
    ClusterRoleBinding grants its ClusterRole everywhere. A binding to a role that is not in
    ``objects`` is an error: the rendered set must be complete.
    """
    roles: dict[tuple[str, str, str | None], Mapping[str, Any]] = {}
    for obj in objects:
        if obj.get("kind") in ("Role", "ClusterRole"):
            meta = obj["metadata"]
            roles[_role_key(str(obj["kind"]), str(meta["name"]), meta.get("namespace"))] = obj
    sa_namespace, sa_name = service_account
    out: set[Grant] = set()
    for obj in objects:
        kind = obj.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == sa_name and s.get("namespace") == sa_namespace
            for s in obj.get("subjects") or ()
        ):
            continue
        scope = obj["metadata"].get("namespace") if kind == "RoleBinding" else None
        ref = obj["roleRef"]
        key = _role_key(str(ref["kind"]), str(ref["name"]), scope)
        assert key in roles, f"{kind} {obj['metadata']['name']} refers to {ref['kind']} {ref['name']}, which is not in the set"
        for rule in roles[key].get("rules") or ():
            names = frozenset(str(n) for n in rule.get("resourceNames") or ())
            out.update(Grant(p, scope, names) for p in rule_permissions(rule))
    return frozenset(out)


def permissions(grants: Iterable[Grant]) -> frozenset[Permission]:
    """The (verb, group, resource, subresource) tuples of ``grants``, whatever their scope."""
    return frozenset(g.permission for g in grants)


def scopes(grants: Iterable[Grant]) -> frozenset[str | None]:
    return frozenset(g.namespace for g in grants)


def _matches(grant: Grant, verb: str, group: str, resource: str, subresource: str, namespace: str, name: str) -> bool:
    p = grant.permission
    return (
        p.verb in (verb, "*")
        and p.group in (group, "*")
        and p.resource in (resource, "*")
        and p.subresource == subresource
        and (grant.namespace is None or grant.namespace == namespace)
        and (not grant.names or name in grant.names)
    )


def allows(grants: Iterable[Grant], verb: str, group: str, resource: str, subresource: str = "", namespace: str = "", name: str = "") -> bool:
    """Whether any grant authorizes the request (RBAC semantics: rules only add, never deny)."""
    return any(_matches(g, verb, group, resource, subresource, namespace, name) for g in grants)


def uncovered(grants: Iterable[Grant], requests: Iterable[Request]) -> list[Request]:
    """The requests no grant authorizes (a real cluster would answer them 403)."""
    fixed = tuple(grants)
    return [r for r in requests if not allows(fixed, r.verb, r.group, r.resource, r.subresource, r.namespace, r.name)]


def unused(grants: Iterable[Grant], requests: Iterable[Request]) -> frozenset[Permission]:
    """Permissions no request used: candidates for removal (or code paths a test did not reach)."""
    seen = {Permission(r.verb, r.group, r.resource, r.subresource) for r in requests}
    return frozenset(g.permission for g in grants if g.permission not in seen)
