package controllers

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/webhook"
)

// TestSidecarVersionsCountsRunningPods: the injector's label first, the
// proxy image's tag for pods injected before the label (the previous
// release), "unknown" without either; finished and deleting pods are not
// counted; the list is in the order of the versions.
func TestSidecarVersionsCountsRunningPods(t *testing.T) {
	pod := func(label, image string, phase corev1.PodPhase, deleting bool) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		if label != "" {
			p.Labels = map[string]string{v1alpha1.LabelSidecarVersion: label}
		}
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:9.9"}}
		if image != "" {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: webhook.ProxyContainerName, Image: image})
		}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	pods := []corev1.Pod{
		pod("0.1.0", "ghcr.io/heatsink-dev/heatsink:0.1.0", corev1.PodRunning, false),
		pod("0.1.0", "ghcr.io/heatsink-dev/heatsink:0.1.0", corev1.PodPending, false),
		pod("", "ghcr.io/heatsink-dev/heatsink:0.0.9", corev1.PodRunning, false),
		pod("", "ghcr.io/heatsink-dev/heatsink@sha256:abc", corev1.PodRunning, false),
		pod("", "", corev1.PodRunning, false),
		pod("0.0.9", "", corev1.PodSucceeded, false),
		pod("0.0.9", "", corev1.PodRunning, true),
	}
	got := sidecarVersions(pods)
	want := []v1alpha1.SidecarVersionCount{{Version: "0.0.9", Pods: 1}, {Version: "0.1.0", Pods: 2}, {Version: unknownSidecarVersion, Pods: 2}}
	if !slices.Equal(got, want) {
		t.Errorf("sidecarVersions = %v, want %v", got, want)
	}
	if got := sidecarVersions(nil); got != nil {
		t.Errorf("no pods: %v, want nil", got)
	}
}
