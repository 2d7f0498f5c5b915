package upstream

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
)

// Secrets mounted as files (the policy's credentials and client certificate
// Secrets) are rotated by the kubelet, which swaps the files in place
// atomically. They are read at each new connection to Redis: reading two
// small files costs microseconds next to a TCP (and TLS) handshake, and
// comparing contents, not modification times, sees a change however soon it
// follows the last one (file timestamps are coarse, a few milliseconds).
// What was parsed is kept, so an unchanged file is not parsed again, and a
// file that cannot be read or parsed (a hand rotation caught between the
// certificate and its key) leaves the last good value in use. Connections
// already open are not touched: Redis checks AUTH and the client
// certificate when a connection starts, not after.

// clientCert is a client certificate and key read from files.
type clientCert struct {
	certFile, keyFile string

	mu              sync.Mutex
	certPEM, keyPEM []byte
	pair            *tls.Certificate
}

func newClientCert(certFile, keyFile string) (*clientCert, error) {
	c := &clientCert{certFile: certFile, keyFile: keyFile}
	if _, err := c.get(); err != nil {
		return nil, err
	}
	return c, nil
}

// get returns the pair in the files, or the last good one if they cannot be
// read or do not match (with no last good one, the error).
func (c *clientCert) get() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(c.certFile)
	var keyPEM []byte
	if err == nil {
		keyPEM, err = os.ReadFile(c.keyFile)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.pair != nil && bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return c.pair, nil
	}
	if err == nil {
		var pair tls.Certificate
		if pair, err = tls.X509KeyPair(certPEM, keyPEM); err == nil {
			c.certPEM, c.keyPEM, c.pair = certPEM, keyPEM, &pair
			return c.pair, nil
		}
	}
	if c.pair != nil {
		return c.pair, nil
	}
	return nil, fmt.Errorf("redis TLS client certificate (%s, %s): %w", c.certFile, c.keyFile, err)
}

// FileCredentials reads the Redis ACL username and password from files at
// each call (see above): the sidecar calls it for every new connection to
// Redis. A missing username file means the default user; a missing password
// file means no AUTH, as when the optional Secret is absent.
type FileCredentials struct {
	UsernameFile, PasswordFile string

	mu         sync.Mutex
	user, pass string
	ok         bool
}

// Get returns the current username and password. If a file exists but cannot
// be read, the last good pair is returned, or the error before any.
func (f *FileCredentials) Get() (username, password string, err error) {
	read := func(path string) (string, error) {
		if path == "" {
			return "", nil
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return string(b), err
	}
	u, err := read(f.UsernameFile)
	var p string
	if err == nil {
		p, err = read(f.PasswordFile)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.user, f.pass, f.ok = u, p, true
		return u, p, nil
	}
	if f.ok {
		return f.user, f.pass, nil
	}
	return "", "", fmt.Errorf("redis credentials: %w", err)
}
