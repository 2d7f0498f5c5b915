package watch

import (
	"errors"
	"os"
	"path/filepath"
	"time"
)

// The routing state in force.
//
// A sidecar must not serve before it knows the routing table in force: one
// without it reads a split counter as its base key alone and writes a
// replicated key only to its base. The watcher therefore tells (InForce)
// when it knows that state, which is one of:
//
//   - a table accepted from the node agent (SourceAgent);
//   - a table accepted from the mounted routing ConfigMap (SourceFile): the
//     kubelet read it when it set up the pod's volumes, just before the
//     sidecar started, and any change published since is one the sidecar
//     will hear of like every running sidecar (cardinality changes are
//     announced a margin ahead);
//   - the mounted routing ConfigMap volume holding no table
//     (SourceUnpublished): see Unpublished for why that is a proof.
//
// An agent that answers nothing, refuses the pod (it does not know it yet)
// or is away proves nothing, nor does a missing file that is not in a
// volume the kubelet wrote: the watcher keeps waiting, and the caller
// decides how long (the sidecar's --startup-wait).

// SourceUnpublished is the mounted routing ConfigMap volume holding no
// table: no table with an entry was in force when the kubelet mounted it.
const SourceUnpublished Source = "unpublished"

// KubeletDataDir is the entry the kubelet's atomic writer creates in every
// ConfigMap, Secret and projected volume it sets up, even an empty one: a
// symlink to the timestamped directory holding the current content. Its
// presence proves that the directory is such a volume and that the kubelet
// finished writing it.
const KubeletDataDir = "..data"

// Unpublished reports whether file is the routing key of a ConfigMap volume
// that the kubelet set up while the ConfigMap did not exist: the directory
// holds KubeletDataDir and file is absent.
//
// That proves that no routing table with an entry was in force when the
// kubelet read the ConfigMap (volumes are set up before any container of
// the pod starts). The manager writes a policy's routing ConfigMap before it
// hands the table to any node agent (so no sidecar anywhere obeys a table
// the ConfigMap did not hold first), and a finalizer keeps the ConfigMap
// until its table holds no split; so an absent ConfigMap means the policy
// has not published yet (a policy just created: its first table has no
// entry, and a later entry comes after sustainFor, a split announced a
// margin ahead) or it was drained and deleted. The injector marks the
// volume optional for this reason: a required one would keep the pod in
// ContainerCreating until the first publication, and the absent ConfigMap
// is itself the answer. A missing file anywhere else (no KubeletDataDir
// beside it: a path a person or a test writes) proves nothing.
func Unpublished(file string) bool {
	if _, err := os.Lstat(file); !errors.Is(err, os.ErrNotExist) {
		return false
	}
	_, err := os.Lstat(filepath.Join(filepath.Dir(file), KubeletDataDir))
	return err == nil
}

// InForce is closed once the watcher knows the routing state in force (a
// table accepted, or the mounted volume proving none was published); it
// stays open while neither source has told.
func (w *Watcher) InForce() <-chan struct{} { return w.inForce }

// InForceSource says what InForce was closed on; empty while it is open.
func (w *Watcher) InForceSource() Source {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inForceSrc
}

// markInForceLocked closes InForce on the first call; w.mu is held.
func (w *Watcher) markInForceLocked(src Source) {
	if w.inForceSrc != "" {
		return
	}
	w.inForceSrc = src
	close(w.inForce)
}

func (w *Watcher) inForceKnown() bool {
	select {
	case <-w.inForce:
		return true
	default:
		return false
	}
}

// startupMaxBackoff caps the retry delay to the agent until the state in
// force is known: at a pod's start the agent refuses it (403) until the
// manager has told it the pod's address, typically within a second, and
// the application's containers wait meanwhile.
const startupMaxBackoff = time.Second
