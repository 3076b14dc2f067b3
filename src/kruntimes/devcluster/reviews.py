"""``TokenReview`` and ``SubjectAccessReview``: the two create-only review APIs, as kube-apiserver answers them.

``POST /apis/authentication.k8s.io/v1/tokenreviews`` and
``POST /apis/authorization.k8s.io/v1/subjectaccessreviews`` decode the body as the server's
REST handler does: a missing ``apiVersion``/``kind`` is taken from the URL, a different one is a
400; then ``tokenreview/storage.go``'s checks (an empty ``spec.token`` is a 400) or
``ValidateSubjectAccessReview``'s (a 422 ``Invalid`` with its field causes). The answer is the
review with its ``status`` filled in, ``201 Created``. Nothing is stored. Any other verb is a 405.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, final

from kruntimes.devcluster import errors
from kruntimes.devcluster.auth import Attributes, Authorizer
from kruntimes.devcluster.errors import FieldError
from kruntimes.devcluster.types import Obj

AUTHENTICATION: Final = "authentication.k8s.io"
AUTHORIZATION: Final = "authorization.k8s.io"
VERSION: Final = "v1"


@final
@dataclass(frozen=True, slots=True)
class Review:
    group: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{VERSION}"

    @property
    def path(self) -> str:
        return f"/apis/{self.group}/{VERSION}/{self.plural}"


TOKEN_REVIEW: Final = Review(AUTHENTICATION, "tokenreviews", "TokenReview")
ACCESS_REVIEW: Final = Review(AUTHORIZATION, "subjectaccessreviews", "SubjectAccessReview")
REVIEWS: Final = (TOKEN_REVIEW, ACCESS_REVIEW)
BY_PATH: Final = {r.path: r for r in REVIEWS}


def discovery_groups() -> list[Obj]:
    """The two groups' ``APIGroup`` entries for ``/apis``."""
    return [api_group(r.group) for r in REVIEWS]


def api_group(name: str) -> Obj:
    entry = {"groupVersion": f"{name}/{VERSION}", "version": VERSION}
    return {"name": name, "versions": [entry], "preferredVersion": entry}


def resource_list(group: str) -> Obj | None:
    """``/apis/<group>/v1``: the review resource, cluster-scoped, create only."""
    found = [r for r in REVIEWS if r.group == group]
    if not found:
        return None
    resources = [{"name": r.plural, "singularName": "", "namespaced": False, "kind": r.kind, "verbs": ["create"]} for r in found]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{VERSION}", "resources": resources}


def _typed(review: Review, body: Any) -> Obj:
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of a {review.kind} must be a JSON object")
    api_version = body.get("apiVersion", "") or review.api_version
    kind = body.get("kind", "") or review.kind
    if api_version != review.api_version:
        raise errors.bad_request(f"the API version in the data ({api_version}) does not match the expected API version ({review.api_version})")
    if kind != review.kind:
        raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({review.kind})")
    spec = body.get("spec", {})
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise errors.bad_request(f"{review.kind} in version \"{VERSION}\" cannot be handled as a {review.kind}: spec must be an object")
    return {**body, "apiVersion": api_version, "kind": kind, "spec": spec}


def _strings(review: Review, value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.bad_request(f"{review.kind} in version \"{VERSION}\" cannot be handled as a {review.kind}: {field} must be a list of strings")
    return list(value)


def _string(review: Review, value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise errors.bad_request(f"{review.kind} in version \"{VERSION}\" cannot be handled as a {review.kind}: {field} must be a string")
    return value


def _shown(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _answer(doc: Obj, status: Obj) -> Obj:
    given = doc.get("metadata")
    meta: Obj = given if isinstance(given, dict) else {}
    return {"kind": doc["kind"], "apiVersion": doc["apiVersion"], "metadata": {**meta, "creationTimestamp": None}, "spec": doc["spec"], "status": status}


def token_review(authorizer: Authorizer, body: Any) -> Obj:
    doc = _typed(TOKEN_REVIEW, body)
    spec = doc["spec"]
    token = _string(TOKEN_REVIEW, spec.get("token"), "spec.token")
    audiences = _strings(TOKEN_REVIEW, spec.get("audiences"), "spec.audiences")
    if not token:
        raise errors.bad_request("token is required for TokenReview in authentication")
    user = authorizer.authenticate(token)
    if user is None:
        # What kube-apiserver answers for a token no authenticator knows: not authenticated, no error text.
        return _answer(doc, {"user": {}})
    status: Obj = {"authenticated": True, "user": user.to_json()}
    if audiences:
        status["audiences"] = audiences
    return _answer(doc, status)


def access_review(authorizer: Authorizer, body: Any) -> Obj:
    doc = _typed(ACCESS_REVIEW, body)
    spec = doc["spec"]
    user = _string(ACCESS_REVIEW, spec.get("user"), "spec.user")
    groups = _strings(ACCESS_REVIEW, spec.get("groups"), "spec.groups")
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    for name, value in (("resourceAttributes", resource), ("nonResourceAttributes", non_resource)):
        if value is not None and not isinstance(value, dict):
            raise errors.bad_request(f"SubjectAccessReview in version \"{VERSION}\" cannot be handled as a SubjectAccessReview: spec.{name} must be an object")
    causes: list[FieldError] = []
    meta = doc.get("metadata")
    if isinstance(meta, dict) and any(v not in (None, "", {}, []) for v in meta.values()):
        causes.append(FieldError("FieldValueInvalid", "metadata", f"Invalid value: {_shown(meta)}: must be empty"))
    if resource is not None and non_resource is not None:
        causes.append(FieldError("FieldValueInvalid", "spec", f"Invalid value: {_shown(non_resource)}: exactly one of nonResourceAttributes or resourceAttributes must be specified"))
    if resource is None and non_resource is None:
        causes.append(FieldError("FieldValueInvalid", "spec", "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"))
    if not user and not groups:
        causes.append(FieldError("FieldValueInvalid", "spec.user", 'Invalid value: "": at least one of user or group must be specified'))
    if causes:
        raise errors.invalid("SubjectAccessReview", AUTHORIZATION, "", causes)
    if non_resource is not None:
        attributes = Attributes(
            user=user,
            groups=tuple(groups),
            verb=_string(ACCESS_REVIEW, non_resource.get("verb"), "spec.nonResourceAttributes.verb"),
            path=_string(ACCESS_REVIEW, non_resource.get("path"), "spec.nonResourceAttributes.path"),
        )
    else:
        assert resource is not None
        attributes = Attributes(
            user=user,
            groups=tuple(groups),
            verb=_string(ACCESS_REVIEW, resource.get("verb"), "spec.resourceAttributes.verb"),
            group=_string(ACCESS_REVIEW, resource.get("group"), "spec.resourceAttributes.group"),
            resource=_string(ACCESS_REVIEW, resource.get("resource"), "spec.resourceAttributes.resource"),
            namespace=_string(ACCESS_REVIEW, resource.get("namespace"), "spec.resourceAttributes.namespace"),
        )
    allowed, reason = authorizer.authorize(attributes)
    status: Obj = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return _answer(doc, status)


def serve(authorizer: Authorizer, review: Review, method: str, body: Any) -> Obj:
    """The answer to ``method`` on ``review``'s collection; raises ``ApiError`` as the server would."""
    if method != "POST":
        raise errors.method_not_allowed(method)
    return token_review(authorizer, body) if review is TOKEN_REVIEW else access_review(authorizer, body)


