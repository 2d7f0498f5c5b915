package demo

import (
	"errors"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// errStageUnavailable marks a part of heatsink that this build does not
// have; the demo runs without it and says so instead of faking it.
var errStageUnavailable = errors.New("not available in this build")

// missingStages lists the parts of heatsink this build lacks.
func missingStages() []string {
	return []string{"manager reconciler (package controllers): " + errStageUnavailable.Error()}
}

// setupReconciler registers the HotKeyPolicy reconciler with mgr. The
// controllers package is not in this build yet.
func setupReconciler(mgr manager.Manager, margin time.Duration) error {
	_, _ = mgr, margin
	return errStageUnavailable
}
