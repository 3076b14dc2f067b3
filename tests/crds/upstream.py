"""Upstream kruntimes' CRDs as facts: what its API types declare, field by field, written here.

Read from upstream's Go API types (``api/v1alpha1/*_types.go``: field types, JSON names,
``+kubebuilder`` markers) at :data:`UPSTREAM_COMMIT`, and checked against the CRDs its chart
publishes (``charts/kruntimes/crds/``) at that commit. Each builder below states one Go marker:
``string(max_length=63)`` is ``+kubebuilder:validation:MaxLength=63``, a field without
``omitempty`` or ``+optional`` is ``required``, ``rule()`` is ``+kubebuilder:validation:XValidation``.
Descriptions are not facts (ours are our own words), so none appear here.

The Kubernetes types upstream embeds (``corev1.PodTemplateSpec``, ``corev1.VolumeSource``,
``corev1.EnvVar``, ``corev1.ResourceList``, ``metav1.LabelSelector``, ``metav1.Condition``,
``metav1.Duration``, ``metav1.Time``) are rendered from k8s.io/api by the controller-gen version
upstream uses, into ``kubernetes_types.json`` (``hack/crdgen/generate.sh``), without descriptions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

Schema = dict[str, Any]

UPSTREAM_REPOSITORY: Final = "https://github.com/kruntimes/kruntimes"
UPSTREAM_COMMIT: Final = "cad392392b4a6442b30f82fcd8e6d06405fb94d4"
"""The commit read (2026-08-08, chart ``charts/kruntimes`` version 0.0.3). Its CRDs were last
regenerated at d9520107 (runs, adding ``spec.source.inlinePath``), 2b0069ac (runtimes) and
17e67330 (persistentworkspaces)."""

KUBERNETES_TYPES: Final = Path(__file__).with_name("kubernetes_types.json")


def _kubernetes() -> Mapping[str, Any]:
    return cast(Mapping[str, Any], json.loads(KUBERNETES_TYPES.read_text()))


def kubernetes_versions() -> dict[str, str]:
    """The generator and API versions ``kubernetes_types.json`` was rendered with."""
    return cast(dict[str, str], dict(_kubernetes()["rendered_with"]))


def kubernetes(name: str) -> Schema:
    """The schema controller-gen renders for the Kubernetes type ``name`` (a fresh copy)."""
    return cast(Schema, json.loads(json.dumps(_kubernetes()["types"][name])))


# --- builders: one Go marker each ---------------------------------------------------------------


def string(
    *,
    min_length: int | None = None,
    max_length: int | None = None,
    pattern: str | None = None,
    enum: Sequence[str] = (),
    default: str | None = None,
    format: str | None = None,
) -> Schema:
    out: Schema = {"type": "string"}
    for key, value in (("minLength", min_length), ("maxLength", max_length), ("pattern", pattern), ("default", default), ("format", format)):
        if value is not None:
            out[key] = value
    if enum:
        out["enum"] = list(enum)
    return out


def integer(format: str, *, minimum: int | None = None, maximum: int | None = None, default: int | None = None) -> Schema:
    out: Schema = {"type": "integer", "format": format}
    for key, value in (("minimum", minimum), ("maximum", maximum), ("default", default)):
        if value is not None:
            out[key] = value
    return out


def boolean() -> Schema:
    return {"type": "boolean"}


def array(items: Schema, *, max_items: int | None = None, list_type: str | None = None, list_map_keys: Sequence[str] = ()) -> Schema:
    out: Schema = {"type": "array", "items": items}
    if max_items is not None:
        out["maxItems"] = max_items
    if list_type is not None:
        out["x-kubernetes-list-type"] = list_type
    if list_map_keys:
        out["x-kubernetes-list-map-keys"] = list(list_map_keys)
    return out


def obj(properties: Mapping[str, Schema], *, required: Sequence[str] = (), rules: Sequence[Schema] = ()) -> Schema:
    """A Go struct: its fields, those without ``omitempty``/``+optional`` (sorted, as controller-gen
    lists them) and its ``XValidation`` rules in marker order."""
    out: Schema = {"type": "object", "properties": dict(properties)}
    if required:
        out["required"] = sorted(required)
    if rules:
        out["x-kubernetes-validations"] = list(rules)
    return out


def string_map(*, max_properties: int | None = None) -> Schema:
    out: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
    if max_properties is not None:
        out["maxProperties"] = max_properties
    return out


def rule(cel: str, message: str) -> Schema:
    return {"rule": cel, "message": message}


def conditions() -> Schema:
    """``[]metav1.Condition`` with ``+listType=map``, ``+listMapKey=type``, ``MaxItems=16`` (all three kinds)."""
    return array(kubernetes("Condition"), max_items=16, list_type="map", list_map_keys=["type"])


def root(spec: Schema, status: Schema) -> Schema:
    """A kind's ``openAPIV3Schema``: TypeMeta, ObjectMeta (opaque to the CRD), spec and status."""
    return obj({"apiVersion": string(), "kind": string(), "metadata": {"type": "object"}, "spec": spec, "status": status})


# --- shared upstream types ----------------------------------------------------------------------------

RUNTIME_NAME: Final = string(min_length=1, max_length=63, pattern="^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
"""``RunSpec.Runtime`` and ``PersistentWorkspaceSpec.Runtime``: a label value."""

ARTIFACT_DRIVER: Final = string(enum=["filesystem", "s3"])


def artifact_store() -> Schema:
    """``RuntimeArtifactStoreSpec`` (Runtime ``spec.artifactStore``, Run ``status.artifactStore``)."""
    return obj(
        {
            "driver": ARTIFACT_DRIVER,
            "filesystem": obj({"volumeClaimName": string(min_length=1)}, required=["volumeClaimName"]),
            "s3": obj(
                {
                    "bucket": string(min_length=1, pattern="^[^/]+$"),
                    "prefix": string(max_length=1024),
                    "region": string(max_length=128),
                    "endpoint": string(max_length=2048),
                    "forcePathStyle": boolean(),
                    "credentialsSecretName": string(min_length=1, max_length=253),
                    "uploadPartSize": integer("int64", minimum=5242880),
                    "uploadConcurrency": integer("int32", minimum=1),
                },
                required=["bucket"],
            ),
        },
        required=["driver"],
        rules=[
            rule(
                "(self.driver == 'filesystem' && has(self.filesystem) && !has(self.s3)) || (self.driver == 's3' && has(self.s3) && !has(self.filesystem))",
                "exactly one artifact store configuration matching driver must be set",
            )
        ],
    )


# --- Run --------------------------------------------------------------------------------------------


def run_affinity_term() -> Schema:
    """``RunAffinityTerm``: a ``*metav1.LabelSelector`` and one supported topology."""
    return obj(
        {"labelSelector": kubernetes("LabelSelector"), "topologyKey": string(enum=["kruntimes.io/runtime-pod"])},
        required=["labelSelector", "topologyKey"],
        rules=[
            rule(
                "has(self.labelSelector) && ((has(self.labelSelector.matchLabels) && size(self.labelSelector.matchLabels) > 0)"
                " || (has(self.labelSelector.matchExpressions) && size(self.labelSelector.matchExpressions) > 0))",
                "labelSelector must not be empty",
            )
        ],
    )


def run_affinity_rules() -> Schema:
    return obj(
        {
            "requiredDuringSchedulingIgnoredDuringExecution": array(run_affinity_term(), max_items=32),
            "preferredDuringSchedulingIgnoredDuringExecution": array(
                obj(
                    {"weight": integer("int32", minimum=1, maximum=100), "runAffinityTerm": run_affinity_term()},
                    required=["weight", "runAffinityTerm"],
                ),
                max_items=32,
            ),
        }
    )


RUN_SPEC_RULES: Final = (
    rule(
        "!has(self.mode.task) || !has(self.mode.task.entrypoint) || (has(self.source) && has(self.source.inline))"
        " || (!self.mode.task.entrypoint.startsWith('/') && !self.mode.task.entrypoint.split('/').exists(segment, segment == '..'))",
        "mode.task.entrypoint must be a relative path that does not contain '..'",
    ),
    rule(
        "!has(self.source) || !has(self.source.inlinePath) || (has(self.mode.function) && has(self.source.inline))",
        "source.inlinePath is only valid for function mode with inline source",
    ),
    rule(
        "!has(self.mode.function) || !has(self.source) || !has(self.source.inline) || has(self.source.inlinePath)",
        "function mode inline source requires source.inlinePath",
    ),
    rule(
        "self.runtime == oldSelf.runtime && has(self.source) == has(oldSelf.source) && (!has(self.source) || self.source == oldSelf.source)"
        " && self.mode == oldSelf.mode && has(self.env) == has(oldSelf.env) && (!has(self.env) || self.env == oldSelf.env)"
        " && has(self.timeout) == has(oldSelf.timeout) && (!has(self.timeout) || self.timeout == oldSelf.timeout)"
        " && has(self.retryPolicy) == has(oldSelf.retryPolicy) && (!has(self.retryPolicy) || self.retryPolicy == oldSelf.retryPolicy)"
        " && has(self.resources) == has(oldSelf.resources) && (!has(self.resources) || self.resources == oldSelf.resources)",
        "runtime, source, mode, env, timeout, retryPolicy, and resources are immutable after Run creation",
    ),
    rule(
        "has(self.workspace) == has(oldSelf.workspace) && (!has(self.workspace) || self.workspace == oldSelf.workspace)"
        " && has(self.affinity) == has(oldSelf.affinity) && (!has(self.affinity) || self.affinity == oldSelf.affinity)",
        "workspace and affinity are immutable after Run creation",
    ),
    rule(
        "!has(oldSelf.cancelRequested) || !oldSelf.cancelRequested || (has(self.cancelRequested) && self.cancelRequested)",
        "cancelRequested may not transition from true to false",
    ),
)


def run_spec() -> Schema:
    return obj(
        {
            "runtime": RUNTIME_NAME,
            "source": obj(
                {
                    "inline": string(max_length=262144),
                    "inlinePath": string(min_length=1, max_length=4096),
                    "repoURL": string(max_length=2048),
                    "commitSHA": string(max_length=256),
                },
                rules=[
                    rule("!(has(self.inline) && has(self.repoURL))", "inline and repoURL are mutually exclusive"),
                    rule("!has(self.commitSHA) || has(self.repoURL)", "commitSHA requires repoURL"),
                    rule(
                        "!has(self.inlinePath) || (!self.inlinePath.startsWith('/')"
                        " && !self.inlinePath.split('/').exists(segment, size(segment) == 0 || segment == '.' || segment == '..'))",
                        "inlinePath must be a relative file path without empty, '.' or '..' segments",
                    ),
                ],
            ),
            "mode": obj(
                {
                    "task": obj(
                        {
                            "entrypoint": string(max_length=4096),
                            "args": array(string(max_length=8192), max_items=256),
                        }
                    ),
                    "function": obj({"handler": string(max_length=512), "idleTimeoutSeconds": integer("int32", minimum=1)}),
                },
                rules=[rule("has(self.task) != has(self.function)", "exactly one of task or function must be set")],
            ),
            "workspace": obj(
                {
                    "name": string(
                        min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
                    ),
                    "kind": string(enum=["PersistentWorkspace"], default="PersistentWorkspace"),
                    "apiGroup": string(enum=["kruntimes.io/v1alpha1"], default="kruntimes.io/v1alpha1"),
                },
                required=["name"],
            ),
            "affinity": obj({"runAffinity": run_affinity_rules(), "runAntiAffinity": run_affinity_rules()}),
            "resources": obj({"requests": kubernetes("ResourceList")}),
            "env": array(kubernetes("EnvVar"), max_items=256),
            "timeout": kubernetes("Duration"),
            "cancelRequested": boolean(),
            "retryPolicy": obj(
                {
                    "maxAttempts": integer("int32", minimum=1, maximum=100),
                    "backoff": kubernetes("Duration"),
                    "retryableReasons": array(string(max_length=128), max_items=32),
                }
            ),
            "ttlSecondsAfterFinished": integer("int32", minimum=0),
        },
        required=["runtime", "mode"],
        rules=RUN_SPEC_RULES,
    )


def artifact_ref() -> Schema:
    return obj(
        {
            "name": string(min_length=1, max_length=255),
            "driver": ARTIFACT_DRIVER,
            "type": string(enum=["file", "directory", "archive", "blob"]),
            "location": obj(
                {
                    "filesystem": obj(
                        {"path": string(min_length=1, max_length=4096), "volumeClaimName": string(max_length=253)}, required=["path"]
                    ),
                    "s3": obj({"bucket": string(min_length=1, max_length=255), "key": string(min_length=1, max_length=4096)}, required=["bucket", "key"]),
                },
                rules=[rule("has(self.filesystem) != has(self.s3)", "exactly one artifact location must be set")],
            ),
            "sizeBytes": integer("int64", minimum=0),
            "digest": string(max_length=256),
            "contentType": string(max_length=255),
            "createdAt": kubernetes("Time"),
        },
        required=["name", "driver", "type", "location", "sizeBytes", "createdAt"],
        rules=[
            rule(
                "(self.driver == 'filesystem' && has(self.location.filesystem)) || (self.driver == 's3' && has(self.location.s3))",
                "artifact location must match driver",
            )
        ],
    )


RUN_PHASES: Final = ("Pending", "Scheduled", "Running", "Ready", "Succeeded", "Failed", "Timeout", "Cancelled")


def run_status() -> Schema:
    return obj(
        {
            "phase": string(enum=RUN_PHASES, default="Pending"),
            "assignedPod": string(),
            "assignedPodUID": string(max_length=253),
            "endpoint": obj(
                {
                    "protocol": string(enum=["HTTPS"]),
                    "url": string(max_length=2048),
                    "caBundle": string(max_length=16384, format="byte"),
                },
                required=["protocol", "url"],
            ),
            "message": string(max_length=4096),
            "startTime": kubernetes("Time"),
            "completionTime": kubernetes("Time"),
            "outputs": string_map(max_properties=64),
            "artifactRefs": array(artifact_ref(), max_items=32),
            "artifactStore": artifact_store(),
            "attempt": integer("int32"),
            "conditions": conditions(),
        },
        required=["phase"],
    )


# --- Runtime ----------------------------------------------------------------------------------------

VOLUME_SOURCES: Final = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
)  # fmt: skip
"""The members of core/v1 VolumeSource, in the order upstream's workspace rule counts them."""

RUNTIME_SPEC_RULES: Final = (
    rule(
        "self.template.spec.containers.size() > 0 && self.template.spec.containers[0].name == 'runtime'",
        "template.spec.containers[0] must be named runtime",
    ),
    rule(
        "self.template.spec.containers.size() == 0 || (self.template.spec.containers[0].image.size() > 0"
        " && self.template.spec.containers[0].image.size() <= 2048)",
        "the runtime container image must contain between 1 and 2048 characters",
    ),
    rule(
        "!has(self.template.spec.restartPolicy) || self.template.spec.restartPolicy == 'Always'",
        "template.spec.restartPolicy must be Always",
    ),
    rule(
        "!has(self.template.spec.ephemeralContainers) || self.template.spec.ephemeralContainers.size() == 0",
        "template.spec.ephemeralContainers is not supported in a Deployment",
    ),
    rule(
        "!has(self.template.spec.serviceAccountName)"
        " || self.template.spec.serviceAccountName.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",
        "template.spec.serviceAccountName must be a valid DNS subdomain",
    ),
)


def runtime_workspace() -> Schema:
    """``RuntimeWorkspaceSpec``: core/v1 VolumeSource inlined, with at most one source."""
    volume = kubernetes("VolumeSource")
    one_source = " + ".join(f"(has(self.{name})?1:0)" for name in VOLUME_SOURCES) + " <= 1"
    return {**volume, "x-kubernetes-validations": [rule(one_source, "at most one workspace volume source may be set")]}


def runtime_spec() -> Schema:
    return obj(
        {
            "template": kubernetes("PodTemplateSpec"),
            "port": integer("int32", minimum=1, default=9091),
            "replicas": integer("int32", minimum=1, default=1),
            "daemonImage": string(max_length=2048),
            "capacity": obj({"resources": kubernetes("ResourceList")}),
            "artifactStore": artifact_store(),
            "workspace": runtime_workspace(),
        },
        required=["template"],
        rules=RUNTIME_SPEC_RULES,
    )


def runtime_status() -> Schema:
    return obj({"readyReplicas": integer("int32"), "conditions": conditions()})


# --- PersistentWorkspace ----------------------------------------------------------------------------


def persistent_workspace_spec() -> Schema:
    return obj(
        {
            "runtime": RUNTIME_NAME,
            "mode": string(enum=["RuntimePodLocal"], default="RuntimePodLocal"),
            "ttlSecondsAfterUnused": integer("int32", minimum=0),
            "cleanupPolicy": string(enum=["DeleteAfterTTL", "Retain"], default="DeleteAfterTTL"),
        },
        required=["runtime"],
    )


def persistent_workspace_status() -> Schema:
    return obj(
        {
            "phase": string(enum=["Pending", "Bound", "Lost", "Released"], default="Pending"),
            "runtime": string(),
            "boundPod": string(),
            "path": string(),
            "lastUsedTime": kubernetes("Time"),
            "conditions": conditions(),
        }
    )


# --- the CRDs ---------------------------------------------------------------------------------------


def column(name: str, type: str, json_path: str) -> Schema:
    """``+kubebuilder:printcolumn``."""
    return {"name": name, "type": type, "jsonPath": json_path}


AGE: Final = column("Age", "date", ".metadata.creationTimestamp")


def crd(kind: str, plural: str, short_name: str, columns: Sequence[Schema], schema: Schema) -> Schema:
    """``+kubebuilder:resource:path=<plural>,scope=Namespaced,shortName=<short>``, ``+kubebuilder:subresource:status``,
    one served storage version ``v1alpha1``: the parts of a CRD that are facts (no metadata beyond the name)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kruntimes.io"},
        "spec": {
            "group": "kruntimes.io",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(), "shortNames": [short_name]},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": list(columns),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def crds() -> dict[str, Schema]:
    """The three upstream CRDs this project installs, by CRD name."""
    found = [
        crd(
            "Run", "runs", "rn",
            [column("Phase", "string", ".status.phase"), column("Assigned Pod", "string", ".status.assignedPod"), column("Runtime", "string", ".spec.runtime"), AGE],
            root(run_spec(), run_status()),
        ),
        crd(
            "Runtime", "runtimes", "rt",
            [
                column("Image", "string", ".spec.template.spec.containers[0].image"),
                column("Replicas", "integer", ".spec.replicas"),
                column("Ready", "integer", ".status.readyReplicas"),
                AGE,
            ],
            root(runtime_spec(), runtime_status()),
        ),
        crd(
            "PersistentWorkspace", "persistentworkspaces", "pw",
            [column("Phase", "string", ".status.phase"), column("Runtime", "string", ".spec.runtime"), column("Bound Pod", "string", ".status.boundPod"), AGE],
            root(persistent_workspace_spec(), persistent_workspace_status()),
        ),
    ]  # fmt: skip
    return {str(c["metadata"]["name"]): c for c in found}


@dataclass(frozen=True, slots=True)
class UpstreamCRD:
    """One of the CRDs upstream's chart installs, and whether this project installs it too."""

    name: str
    kind: str
    installed_here: bool


UPSTREAM_CRDS: Final = (
    UpstreamCRD("runs.kruntimes.io", "Run", True),
    UpstreamCRD("runtimes.kruntimes.io", "Runtime", True),
    UpstreamCRD("persistentworkspaces.kruntimes.io", "PersistentWorkspace", True),
    UpstreamCRD("actions.kruntimes.io", "Action", False),
    UpstreamCRD("workflows.kruntimes.io", "Workflow", False),
    UpstreamCRD("workflowruns.kruntimes.io", "WorkflowRun", False),
)
"""Every CRD of upstream's chart (``charts/kruntimes/crds/``): the scheduler reads Runs,
PersistentWorkspaces and Pods, and Runtimes are the objects Runs name; Actions, Workflows and
WorkflowRuns belong to upstream's controller alone."""
