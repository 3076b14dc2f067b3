"""Which replica owns which namespace in sharded mode: names, and the load-bounded rendezvous.

A namespace is the unit: a Run is placed only on Runtime Pods of its own namespace
(SPEC §1), so replicas that split namespaces never plan against each other's usage.
Every replica computes the same owners from the same inputs — the namespaces to
share and the live members, both read from the API server — so they agree without
talking to each other; the assignment Leases (effects/sharding.py) only make the
handoff safe when their views differ for a moment.

Rendezvous (highest random weight) hashing ranks the members per namespace by a hash
of (member, namespace): a member that leaves moves only its own namespaces, a member
that joins takes only namespaces it now ranks first on. Alone it splits 40 namespaces
over 4 members anywhere between 5 and 16 apiece; a *load bound* caps every member at
``ceil(namespaces / members)``: namespaces are placed in name order, each on its
highest-ranked member that is not full. That costs a few extra moves when membership
changes and makes the split even.

Purely computational: no clock, no I/O, no randomness (the hash is sha256, not Python's
salted ``hash``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from typing import Final

GROUP_LABEL: Final = "kruntimes.io/shard-group"
ROLE_LABEL: Final = "kruntimes.io/shard-role"
NAMESPACE_LABEL: Final = "kruntimes.io/shard-namespace"
MEMBER_ROLE: Final = "member"
ASSIGNMENT_ROLE: Final = "assignment"

DEFAULT_GROUP: Final = "kruntimes-scheduler"
MAX_NAME: Final = 253
_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NOT_NAME: Final = re.compile(r"[^a-z0-9-]+")


def group_problem(group: str) -> str | None:
    """Why ``group`` cannot name a shard group (it is a label value and a Lease-name prefix)."""
    if not group:
        return "must not be empty"
    if len(group) > 63 or _LABEL.fullmatch(group) is None:
        return "must be a DNS label: at most 63 lower-case letters, digits and '-', starting and ending alphanumeric"
    return None


def member_lease_name(group: str, identity: str) -> str:
    """``<group>-member-<identity, made a name>``: one membership Lease per replica process."""
    prefix = f"{group}-member-"
    suffix = _NOT_NAME.sub("-", identity.lower()).strip("-") or "x"
    if len(prefix) + len(suffix) <= MAX_NAME:
        return prefix + suffix
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    room = MAX_NAME - len(prefix) - len(digest) - 1
    return f"{prefix}{suffix[:room].rstrip('-')}-{digest}"


def assignment_lease_name(group: str, namespace: str) -> str:
    """``<group>-ns-<namespace>``: whoever it names may write for the namespace."""
    return f"{group}-ns-{namespace}"


def _weight(member: str, namespace: str) -> bytes:
    return hashlib.sha256(f"{member}/{namespace}".encode()).digest()


def ranking(namespace: str, members: Iterable[str]) -> tuple[str, ...]:
    """The members in the order the namespace prefers them (highest weight first, then name)."""
    return tuple(sorted(set(members), key=lambda member: (_weight(member, namespace), member), reverse=True))


def assign(namespaces: Iterable[str], members: Iterable[str]) -> Mapping[str, str]:
    """``namespace -> member``: each namespace on its best-ranked member that holds fewer than
    ``ceil(namespaces / members)``; empty when there is no member."""
    chosen_members = sorted(set(members))
    names = sorted(set(namespaces))
    if not chosen_members:
        return {}
    bound = math.ceil(len(names) / len(chosen_members))
    load = dict.fromkeys(chosen_members, 0)
    owners: dict[str, str] = {}
    for namespace in names:
        for member in ranking(namespace, chosen_members):
            if load[member] < bound:
                owners[namespace] = member
                load[member] += 1
                break
    return owners


def owned_by(owners: Mapping[str, str], member: str) -> frozenset[str]:
    """The namespaces ``owners`` gives to ``member``."""
    return frozenset(namespace for namespace, owner in owners.items() if owner == member)
