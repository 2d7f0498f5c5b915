// Package scheme builds the runtime.Scheme every heatsink component uses:
// client-go's built-in kinds and heatsink's own. It lives apart from the test
// harnesses so that the production binary links only this.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// New returns a scheme with client-go's kinds and heatsink's. It panics only
// on a programming error (a kind registered twice), as kubebuilder's
// generated main does.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}
