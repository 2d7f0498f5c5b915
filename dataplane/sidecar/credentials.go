package sidecar

import (
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
)

// fileCredentials is the credentials Secret mounted as files at userFile
// and passFile (proxy.FileCredentials), read once now so that a file that
// cannot be read stops the start with its error; nil when neither is set.
// Built before anything connects: the Sentinel follower's first ROLE check
// of the master already needs Redis' credentials.
func fileCredentials(userFile, passFile string) (*proxy.FileCredentials, error) {
	if userFile == "" && passFile == "" {
		return nil, nil
	}
	c := &proxy.FileCredentials{UsernameFile: userFile, PasswordFile: passFile}
	if _, _, err := c.Get(); err != nil {
		return nil, err
	}
	return c, nil
}

// provider is c as a go-redis CredentialsProvider, asked at each new
// connection, so a rotated Secret applies to the next one; nil (the
// static username and password apply) when c is nil. Get fails only
// before its first good read, which fileCredentials made.
func provider(c *proxy.FileCredentials) func() (string, string) {
	if c == nil {
		return nil
	}
	return func() (string, string) {
		u, p, _ := c.Get()
		return u, p
	}
}
