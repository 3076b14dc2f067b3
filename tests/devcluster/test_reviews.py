"""TokenReview and SubjectAccessReview as a real API server answers them, over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.auth import AuthFileError, Authorizer, parse_policy_file, parse_token_file

ADMIN = "admin-token"
TOKENS = 'reader-token,prometheus,1001,"monitoring,ops"\nother-token,other,1002\n'
POLICY = (
    "# the scraper\n"
    '{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy",'
    ' "spec": {"group": "monitoring", "nonResourcePath": "/metrics", "readonly": true}}\n'
)
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    authorizer = Authorizer(tokens=parse_token_file(TOKENS), policy=parse_policy_file(POLICY))
    with DevCluster.start(simulator=None, token=ADMIN, authorizer=authorizer) as running:
        yield running


def call(cluster: DevCluster, method: str, path: str, body: object = None, token: str = ADMIN) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(cluster.url + path, data=data, method=method, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def sar(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def test_a_known_token_is_authenticated_with_its_user_and_groups(cluster: DevCluster) -> None:
    code, answer = call(cluster, "POST", TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "reader-token"}})
    assert code == 201
    assert answer["status"] == {"authenticated": True, "user": {"username": "prometheus", "uid": "1001", "groups": ["monitoring", "ops", "system:authenticated"]}}
    _, admin = call(cluster, "POST", TOKEN_REVIEWS, {"spec": {"token": ADMIN}})
    assert admin["status"]["user"]["groups"] == ["system:masters", "system:authenticated"]


def test_an_unknown_token_is_not_authenticated_and_missing_type_fields_come_from_the_url(cluster: DevCluster) -> None:
    code, answer = call(cluster, "POST", TOKEN_REVIEWS, {"spec": {"token": "nope"}})
    assert code == 201
    assert (answer["apiVersion"], answer["kind"]) == ("authentication.k8s.io/v1", "TokenReview")
    assert answer["status"] == {"user": {}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"spec": {}}, "token is required for TokenReview in authentication"),
        ({"apiVersion": "authentication.k8s.io/v1beta1", "spec": {"token": "x"}}, "does not match the expected API version"),
        ({"kind": "SubjectAccessReview", "spec": {"token": "x"}}, "does not match the expected kind"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_a_malformed_token_review_is_a_400(cluster: DevCluster, body: object, message: str) -> None:
    code, status = call(cluster, "POST", TOKEN_REVIEWS, body)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert message in status["message"]


def test_access_is_decided_by_the_policy_and_masters_may_do_anything(cluster: DevCluster) -> None:
    metrics = {"path": "/metrics", "verb": "get"}
    assert call(cluster, "POST", ACCESS_REVIEWS, sar({"user": "prometheus", "groups": ["monitoring"], "nonResourceAttributes": metrics}))[1]["status"]["allowed"] is True
    assert call(cluster, "POST", ACCESS_REVIEWS, sar({"user": "other", "nonResourceAttributes": metrics}))[1]["status"]["allowed"] is False
    readonly = {"path": "/metrics", "verb": "post"}
    assert call(cluster, "POST", ACCESS_REVIEWS, sar({"groups": ["monitoring"], "nonResourceAttributes": readonly}))[1]["status"]["allowed"] is False
    other_path = {"path": "/debug", "verb": "get"}
    assert call(cluster, "POST", ACCESS_REVIEWS, sar({"groups": ["monitoring"], "nonResourceAttributes": other_path}))[1]["status"]["allowed"] is False
    pods = {"verb": "list", "resource": "pods", "namespace": "default"}
    assert call(cluster, "POST", ACCESS_REVIEWS, sar({"user": "prometheus", "groups": ["monitoring"], "resourceAttributes": pods}))[1]["status"]["allowed"] is False
    assert call(cluster, "POST", ACCESS_REVIEWS, sar({"user": "root", "groups": ["system:masters"], "resourceAttributes": pods}))[1]["status"]["allowed"] is True


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        ({"user": "u"}, ["spec"]),
        ({"user": "u", "nonResourceAttributes": {}, "resourceAttributes": {}}, ["spec"]),
        ({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}, ["spec.user"]),
        ({}, ["spec", "spec.user"]),
    ],
)
def test_an_invalid_access_review_is_a_422_with_its_causes(cluster: DevCluster, spec: dict[str, Any], fields: list[str]) -> None:
    code, status = call(cluster, "POST", ACCESS_REVIEWS, sar(spec))
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('SubjectAccessReview.authorization.k8s.io "" is invalid: ')
    assert [c["field"] for c in status["details"]["causes"]] == fields


def test_reviews_can_only_be_created(cluster: DevCluster) -> None:
    for path in (TOKEN_REVIEWS, ACCESS_REVIEWS):
        code, status = call(cluster, "GET", path)
        assert (code, status["reason"]) == (405, "MethodNotAllowed")


def test_discovery_lists_both_review_groups(cluster: DevCluster) -> None:
    _, groups = call(cluster, "GET", "/apis")
    names = {g["name"] for g in groups["groups"]}
    assert {"authentication.k8s.io", "authorization.k8s.io"} <= names
    _, resources = call(cluster, "GET", "/apis/authorization.k8s.io/v1")
    assert resources["resources"] == [{"name": "subjectaccessreviews", "singularName": "", "namespaced": False, "kind": "SubjectAccessReview", "verbs": ["create"]}]


def test_users_of_the_token_file_are_let_in_and_strangers_are_not(cluster: DevCluster) -> None:
    assert call(cluster, "GET", "/api/v1/namespaces", token="reader-token")[0] == 200
    code, status = call(cluster, "GET", "/api/v1/namespaces", token="stranger")
    assert (code, status["reason"]) == (401, "Unauthorized")
    assert call(cluster, "POST", TOKEN_REVIEWS, {"spec": {"token": "x"}}, token="stranger")[0] == 401


@pytest.mark.parametrize("text", ["only,two\n", ",user,1\n", "t,u,1\nt,v,2\n"])
def test_a_bad_token_file_is_refused(text: str) -> None:
    with pytest.raises(AuthFileError):
        parse_token_file(text)


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        '{"apiVersion": "v1", "kind": "Policy", "spec": {}}',
        '{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"readonly": "yes"}}',
        '{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"users": "typo"}}',
    ],
)
def test_a_bad_policy_line_is_refused(line: str) -> None:
    with pytest.raises(AuthFileError):
        parse_policy_file(line)
