package upstream

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"time"
)

// DefaultDialTimeout bounds a dial and its TLS handshake when the Dialer
// names no timeout (go-redis' default).
const DefaultDialTimeout = 5 * time.Second

// Dialer is how the sidecar reaches any Redis node, one implementation for
// both of its stacks: the proxy's raw connections (Conn, ConnWith) and the
// engine's go-redis clients, replicas, raw reads and tracking connection
// (Dial as their Options.Dialer, Provider as their CredentialsProvider).
// TLS is checked against the CA bundle and client certificate as they are
// at each handshake (ClientTLS), and the credentials are read at each new
// connection (FileCredentials), so a rotated Secret applies to the next
// connection of either stack without a restart; open connections stay as
// they were authenticated, as Redis checks both only at the start.
type Dialer struct {
	// TLS, if set, wraps every connection (build it with ClientTLS); nil
	// means plaintext. Credentials are sent only after the handshake.
	TLS *tls.Config
	// Timeout bounds a dial and its handshake (DefaultDialTimeout if zero).
	Timeout time.Duration
	// Username and Password authenticate every connection, unless Files
	// is set: then they are read from the mounted Secret at each one.
	Username, Password string
	Files              *FileCredentials
}

// Conn connects to addr (TLS included); the caller authenticates with
// Credentials.
func (d *Dialer) Conn(ctx context.Context, addr string) (net.Conn, error) {
	return d.ConnWith(ctx, addr, 0, nil)
}

// ConnWith is Conn bounded by timeout (the Dialer's if zero), with wrap, if
// set, applied to the TCP connection under TLS: the proxy's event loop
// takes the descriptor from under crypto/tls (tlsTransport).
func (d *Dialer) ConnWith(ctx context.Context, addr string, timeout time.Duration, wrap func(net.Conn) net.Conn) (net.Conn, error) {
	if timeout <= 0 {
		timeout = d.Timeout
	}
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nd := net.Dialer{KeepAlive: 30 * time.Second}
	raw, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil || d.TLS == nil {
		return raw, err
	}
	tc, err := handshake(ctx, raw, d.TLS, addr, wrap)
	if err != nil {
		raw.Close()
		return nil, err
	}
	return tc, nil
}

// Dial is Conn as a go-redis Options.Dialer. The engine's clients dial with
// it rather than with Options.TLSConfig, with which go-redis keeps the CA
// bundle read at start whenever no server name is set (see caBundle).
func (d *Dialer) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	return d.Conn(ctx, addr)
}

// Credentials are the username and password for a new connection now.
func (d *Dialer) Credentials() (username, password string, err error) {
	if d.Files != nil {
		return d.Files.Get()
	}
	return d.Username, d.Password, nil
}

// Provider is Credentials as a go-redis CredentialsProvider (asked at each
// new connection), or nil when the static Username and Password apply.
// FileCredentials.Get fails only before its first good read, which
// ReadFileCredentials made.
func (d *Dialer) Provider() func() (string, string) {
	if d.Files == nil {
		return nil
	}
	return func() (string, string) {
		u, p, _ := d.Files.Get()
		return u, p
	}
}

// ReadFileCredentials is the credentials Secret mounted as files at
// userFile and passFile, read once now so that a file that cannot be read
// stops the start with its error; nil when neither is set.
func ReadFileCredentials(userFile, passFile string) (*FileCredentials, error) {
	if userFile == "" && passFile == "" {
		return nil, nil
	}
	c := &FileCredentials{UsernameFile: userFile, PasswordFile: passFile}
	if _, _, err := c.Get(); err != nil {
		return nil, err
	}
	return c, nil
}

// AuthArgs is the AUTH command for user and pass, nil when there is no
// password (Redis' default user without one).
func AuthArgs(user, pass string) [][]byte {
	switch {
	case pass == "":
		return nil
	case user == "":
		return [][]byte{[]byte("AUTH"), []byte(pass)}
	}
	return [][]byte{[]byte("AUTH"), []byte(user), []byte(pass)}
}

// HelloArgs is HELLO proto with AUTH for user and pass (the default user
// when user is empty), or without when there is no password.
func HelloArgs(proto int, user, pass string) []string {
	hello := []string{"HELLO", strconv.Itoa(proto)}
	if pass != "" {
		if user == "" {
			user = "default"
		}
		hello = append(hello, "AUTH", user, pass)
	}
	return hello
}
