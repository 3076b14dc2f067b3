// Package coretypes holds one field of each Kubernetes type that upstream kruntimes' API embeds
// (k8s.io/api and k8s.io/apimachinery, at the versions of upstream's go.mod), so that controller-gen
// renders their schemas exactly as it does in upstream's CRDs. Each field's own markers are the
// ones the embedding upstream field carries where they change the rendering (none do today: list
// types and bounds on the embedding fields are facts of upstream's types, in tests/crds/upstream.py).
//
// +groupName=coretypes.kruntimes.test
// +kubebuilder:object:generate=false
package coretypes

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CoreTypesSpec has one field per embedded type, named after it.
type CoreTypesSpec struct {
	PodTemplateSpec corev1.PodTemplateSpec `json:"PodTemplateSpec"`
	VolumeSource    corev1.VolumeSource    `json:"VolumeSource"`
	EnvVar          corev1.EnvVar          `json:"EnvVar"`
	ResourceList    corev1.ResourceList    `json:"ResourceList"`
	LabelSelector   metav1.LabelSelector   `json:"LabelSelector"`
	Condition       metav1.Condition       `json:"Condition"`
	Duration        metav1.Duration        `json:"Duration"`
	Time            metav1.Time            `json:"Time"`
}

// CoreTypes is only a carrier for controller-gen; it is never served.
//
// +kubebuilder:object:root=true
type CoreTypes struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec CoreTypesSpec `json:"spec"`
}
