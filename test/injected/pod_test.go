// Package injected runs the sidecar exactly as the injection webhook writes
// it into a pod: webhook.Inject on a pod spec, then the proxy container's
// arguments, environment and mounted volumes turned into a real
// `heatsink sidecar` process on this host, against real Redis.
package injected

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/heatsink-dev/heatsink/injectlink"
	"github.com/heatsink-dev/heatsink/internal/testing/heatsinkbin"
)

// kubelet stands in for the kubelet of one pod on this host: it lays out
// the pod's Secret and ConfigMap volumes and resolves the container's
// environment as the kubelet does, from Secrets and ConfigMaps it holds.
type kubelet struct {
	t          *testing.T
	pod        *corev1.Pod
	secrets    map[string]map[string]string
	configMaps map[string]map[string]string
	// dirs are the volumes' directories on this host, by volume name.
	dirs map[string]string
}

// volumeDir lays out the pod's volume name in a temporary directory (once)
// and returns it.
func (k *kubelet) volumeDir(name string) string {
	k.t.Helper()
	if d, ok := k.dirs[name]; ok {
		return d
	}
	var vol *corev1.Volume
	for i := range k.pod.Spec.Volumes {
		if k.pod.Spec.Volumes[i].Name == name {
			vol = &k.pod.Spec.Volumes[i]
		}
	}
	if vol == nil {
		k.t.Fatalf("the container mounts volume %q, which the pod does not have", name)
	}
	dir := k.t.TempDir()
	k.dirs[name] = dir
	k.fill(vol, dir)
	return dir
}

// fill writes vol's content into dir as the kubelet's atomic writer does:
// the files in a timestamped directory, ..data a symlink to it, each key
// a symlink through ..data. Called again (the Secret changed), it swaps
// ..data, which is how a mounted Secret rotates.
func (k *kubelet) fill(vol *corev1.Volume, dir string) {
	k.t.Helper()
	var data map[string]string
	var items []corev1.KeyToPath
	var optional *bool
	var what string
	switch {
	case vol.Secret != nil:
		data, items, optional, what = k.secrets[vol.Secret.SecretName], vol.Secret.Items, vol.Secret.Optional, "Secret "+vol.Secret.SecretName
		if _, ok := k.secrets[vol.Secret.SecretName]; !ok {
			data = nil
		}
	case vol.ConfigMap != nil:
		data, items, optional, what = k.configMaps[vol.ConfigMap.Name], vol.ConfigMap.Items, vol.ConfigMap.Optional, "ConfigMap "+vol.ConfigMap.Name
	case vol.EmptyDir != nil:
		return
	default:
		k.t.Fatalf("volume %q: a kind this kubelet does not lay out", vol.Name)
	}
	if data == nil && (optional == nil || !*optional) {
		k.t.Fatalf("volume %q: %s is missing and not optional: the pod would stay in ContainerCreating", vol.Name, what)
	}
	files := map[string]string{}
	if len(items) == 0 {
		for key, v := range data {
			files[key] = v
		}
	}
	for _, it := range items {
		if v, ok := data[it.Key]; ok {
			files[it.Path] = v
		}
	}
	ts, err := os.MkdirTemp(dir, "..data-")
	if err != nil {
		k.t.Fatal(err)
	}
	for p, v := range files {
		if err := os.WriteFile(filepath.Join(ts, p), []byte(v), 0o600); err != nil {
			k.t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			if err := os.Symlink(filepath.Join("..data", p), filepath.Join(dir, p)); err != nil {
				k.t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		k.t.Fatal(err)
	}
}

// updateSecret changes Secret name and brings the change into every
// volume of it already laid out, as the kubelet does within its sync
// period.
func (k *kubelet) updateSecret(name string, data map[string]string) {
	k.t.Helper()
	k.secrets[name] = data
	for i := range k.pod.Spec.Volumes {
		v := &k.pod.Spec.Volumes[i]
		if d, ok := k.dirs[v.Name]; ok && v.Secret != nil && v.Secret.SecretName == name {
			k.fill(v, d)
		}
	}
}

// sidecarProcess is the injected proxy container, running.
type sidecarProcess struct {
	cmd *exec.Cmd
	// listen is the application's address, http the probes' and metrics'.
	listen, http string
	started      time.Time
	log          *syncBuffer
	done         chan struct{}
}

// run starts container c of the pod as the kubelet would: its image's
// binary (HEATSINK_BIN) with its arguments and its environment resolved
// (values with $(VAR) expanded from the variables before them, fieldRefs
// from the pod with the node's and the pod's IP 127.0.0.1, secretKeyRefs
// from k's Secrets). Two things differ, because this host has neither the
// container's filesystem nor the pod's network namespace: a path under a
// volume's mount path names the volume's directory here, and the
// container's listen address and HTTP address are free loopback ports
// instead of its own fixed ports. Nothing else is changed.
func (k *kubelet) run(t *testing.T, c corev1.Container) *sidecarProcess {
	t.Helper()
	if len(c.Command) != 0 {
		t.Fatalf("container %s overrides the image's entrypoint with %v", c.Name, c.Command)
	}
	mounts := map[string]string{} // mount path -> directory here
	for _, m := range c.VolumeMounts {
		mounts[strings.TrimSuffix(m.MountPath, "/")] = k.volumeDir(m.Name)
	}
	local := func(v string) string {
		for path, dir := range mounts {
			if v == path || strings.HasPrefix(v, path+"/") {
				return dir + strings.TrimPrefix(v, path)
			}
		}
		return v
	}
	p := &sidecarProcess{listen: freeAddr(t), http: freeAddr(t), log: &syncBuffer{}, done: make(chan struct{})}
	vars := map[string]string{}
	var env []string
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = expand(e.Value, vars)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				v = k.pod.Namespace
			case "metadata.name":
				v = k.pod.Name
			case "status.hostIP", "status.podIP":
				v = "127.0.0.1"
			default:
				t.Fatalf("env %s: fieldRef %s not resolved here", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			x, ok := k.secrets[ref.Name][ref.Key]
			if !ok {
				if ref.Optional == nil || !*ref.Optional {
					t.Fatalf("env %s: Secret %s has no key %s and the reference is not optional", e.Name, ref.Name, ref.Key)
				}
				continue // an optional key that is missing: the variable is not set
			}
			v = x
		default:
			t.Fatalf("env %s: a source this kubelet does not resolve", e.Name)
		}
		switch e.Name {
		case injectlink.EnvListen:
			v = p.listen
		case injectlink.EnvHTTPAddress:
			v = p.http
		default:
			v = local(v)
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = local(a)
	}
	// Only what the kubelet gives the container: no variable of this
	// test's environment leaks in.
	p.cmd = exec.Command(heatsinkbin.Path(t), args...)
	p.cmd.Env = append(env, "PATH="+os.Getenv("PATH"))
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("sidecar log (last 4 KiB):\n%s", p.log.tail(4096))
		}
	})
	return p
}

// waitServing waits until the sidecar accepts connections on its listen
// address and its startup probe (the injected container's /startupz)
// passes, and returns the time each took from the process' start.
func (p *sidecarProcess) waitServing(ctx context.Context, limit time.Duration) (listening, started time.Duration, err error) {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return 0, 0, fmt.Errorf("the sidecar exited: %v", p.cmd.ProcessState)
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-tick.C:
		}
		if listening == 0 {
			if c, err := net.DialTimeout("tcp", p.listen, time.Second); err == nil {
				c.Close()
				listening = time.Since(p.started)
			}
		}
		if listening != 0 {
			if r, err := http.Get("http://" + p.http + "/startupz"); err == nil {
				r.Body.Close()
				if r.StatusCode == http.StatusOK {
					return listening, time.Since(p.started), nil
				}
			}
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("the sidecar does not serve %v after its start (listening: %v)", limit, listening != 0)
		}
	}
}

// expand resolves the $(VAR) references of an environment value from
// vars, as the kubelet does: $$ is a literal $, and a reference to a
// variable not defined before stays as it is.
func expand(s string, vars map[string]string) string {
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			out.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			out.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i:], ')'); end > 0 {
				name := s[i+2 : i+end]
				if v, ok := vars[name]; ok {
					out.WriteString(v)
				} else {
					out.WriteString(s[i : i+end+1])
				}
				i += end
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// freeAddr is a loopback address free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a bytes.Buffer written by the process' output copier and
// read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
