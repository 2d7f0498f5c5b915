// Package testpki makes certificate authorities and certificates for tests
// of TLS to Redis, and starts a real redis-server that verifies its clients'
// certificates (tls-auth-clients yes).
package testpki

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File holds Cert, PEM.
	File string
}

var serial atomic.Int64

// NewCA makes a CA named name and writes its certificate to dir/name.crt.
func NewCA(tb testing.TB, dir, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	file := filepath.Join(dir, name+".crt")
	WriteFile(tb, file, pemOf("CERTIFICATE", der))
	return &CA{Cert: cert, key: key, File: file}
}

// IssuePEM returns a certificate for cn signed by ca and its key, PEM: a
// server certificate for 127.0.0.1 and the DNS name cn when server is true,
// a client one otherwise.
func (ca *CA) IssuePEM(tb testing.TB, cn string, server bool) (certPEM, keyPEM []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{cn}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return pemOf("CERTIFICATE", der), pemOf("EC PRIVATE KEY", keyDER)
}

// Issue writes IssuePEM's pair to certFile and keyFile, replacing what they
// held.
func (ca *CA) Issue(tb testing.TB, cn string, server bool, certFile, keyFile string) {
	tb.Helper()
	c, k := ca.IssuePEM(tb, cn, server)
	WriteFile(tb, certFile, c)
	WriteFile(tb, keyFile, k)
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// WriteFile writes b next to path and renames it over path, as the kubelet
// swaps a Secret's files: a reader never sees half a file.
func WriteFile(tb testing.TB, path string, b []byte) {
	tb.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// MTLSRedis starts a real redis-server whose TLS port verifies clients
// (tls-auth-clients yes) against clientCA; its certificate is signed by
// serverCA. It returns the TLS address and the server, whose plaintext
// port (srv.Addr) serves checks made around the client under test.
func MTLSRedis(tb testing.TB, dir string, serverCA, clientCA *CA, extraArgs ...string) (string, *redisproc.Server) {
	tb.Helper()
	certFile, keyFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	serverCA.Issue(tb, "redis.test", true, certFile, keyFile)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := append([]string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", clientCA.File, "--tls-auth-clients", "yes"}, extraArgs...)
	srv := redistest.Standalone(tb, args...)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), srv
}

// MTLSCluster starts a real 3-master Redis Cluster whose nodes serve TLS
// that verifies clients (tls-auth-clients yes) against clientCA, with
// certificates signed by serverCA, and speak TLS among themselves
// (tls-cluster, tls-replication), so that CLUSTER SLOTS and redirects
// name their TLS ports to a TLS client, as a managed TLS cluster does. It
// returns the cluster, whose plaintext ports serve checks made around the
// client under test, and the nodes' TLS addresses in the same order.
func MTLSCluster(tb testing.TB, dir string, serverCA, clientCA *CA) (*redisproc.Cluster, []string) {
	tb.Helper()
	certFile, keyFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	serverCA.Issue(tb, "redis.test", true, certFile, keyFile)
	// A node dials the others with a client certificate of its own, and
	// checks their server certificates: both CAs are in its bundle.
	nodeCert, nodeKey := filepath.Join(dir, "node-client.crt"), filepath.Join(dir, "node-client.key")
	clientCA.Issue(tb, "redis-node", false, nodeCert, nodeKey)
	bundle := filepath.Join(dir, "node-ca.crt")
	sp, err := os.ReadFile(serverCA.File)
	if err != nil {
		tb.Fatal(err)
	}
	cp, err := os.ReadFile(clientCA.File)
	if err != nil {
		tb.Fatal(err)
	}
	WriteFile(tb, bundle, append(sp, cp...))
	tlsPort := map[int]int{}
	c, err := redisproc.StartClusterWith(context.Background(), redisproc.ClusterOptions{Masters: 3, NodeArgs: func(port int) []string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		tp := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		tlsPort[port] = tp
		return []string{"--tls-port", strconv.Itoa(tp), "--cluster-port", strconv.Itoa(port + 10000),
			"--tls-cluster", "yes", "--tls-replication", "yes",
			"--tls-cert-file", certFile, "--tls-key-file", keyFile,
			"--tls-client-cert-file", nodeCert, "--tls-client-key-file", nodeKey,
			"--tls-ca-cert-file", bundle, "--tls-auth-clients", "yes"}
	}})
	if err != nil {
		tb.Fatalf("start a TLS redis cluster: %v", err)
	}
	tb.Cleanup(c.Stop)
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort[s.Port])))
	}
	return c, addrs
}
