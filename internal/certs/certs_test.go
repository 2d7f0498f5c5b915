package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var names = []string{"heatsink-webhook-service.heatsink-system.svc", "heatsink-webhook-service.heatsink-system.svc.cluster.local"}

var testCfg = Config{DNSNames: names, CAValidity: 300 * 24 * time.Hour, CertValidity: 30 * 24 * time.Hour, Grace: 10 * time.Minute}

// verify checks that the bundle's serving certificate chains to its CA
// bundle for every name at now, as the API server would.
func verify(t *testing.T, b *Bundle, now time.Time) {
	t.Helper()
	leaf, err := parseCert(b.Cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CABundle) {
		t.Fatal("CA bundle holds no certificate")
	}
	for _, n := range names {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: pool, CurrentTime: now}); err != nil {
			t.Fatalf("at %v the serving certificate does not verify for %s: %v", now, n, err)
		}
	}
	if _, err := b.TLSCertificate(); err != nil {
		t.Fatal(err)
	}
}

func TestNextCreatesFromNothingOrGarbage(t *testing.T) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	for name, cur := range map[string]*Bundle{
		"nil":     nil,
		"empty":   {},
		"garbage": {CACert: []byte("not pem"), CAKey: []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
	} {
		t.Run(name, func(t *testing.T) {
			b, reason, err := Next(now, cur, testCfg)
			if err != nil || reason != ReasonNew {
				t.Fatalf("got reason %q, err %v; want %q", reason, err, ReasonNew)
			}
			verify(t, b, now)
		})
	}
}

func TestNextRejectsMismatchedCAKey(t *testing.T) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	a, _, _ := Next(now, nil, testCfg)
	b, _, _ := Next(now, nil, testCfg)
	mixed := *a
	mixed.CAKey = b.CAKey
	_, reason, err := Next(now, &mixed, testCfg)
	if err != nil || reason != ReasonNew {
		t.Fatalf("a CA key not matching its certificate must start over: reason %q err %v", reason, err)
	}
}

func TestNextNeedsNames(t *testing.T) {
	if _, _, err := Next(time.Now(), nil, Config{}); err == nil {
		t.Fatal("want an error without DNS names")
	}
}

// TestRotationOverTime walks a fake clock over two CA lifetimes, calling Next
// every check interval as the rotator does, and checks at every step that
// the served chain verifies against the bundle the API server holds, that
// both the CA and the serving certificate were renewed in the right order,
// and that the bundle never grows without bound.
func TestRotationOverTime(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	b, _, err := Next(clk.Now(), nil, testCfg)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[Reason]int{}
	var order []Reason
	end := clk.Now().Add(2 * testCfg.CAValidity)
	for clk.Now().Before(end) {
		clk.Step(6 * time.Hour)
		next, reason, err := Next(clk.Now(), b, testCfg)
		if err != nil {
			t.Fatal(err)
		}
		if reason == ReasonNone {
			if next != b {
				t.Fatal("no reason but a new bundle")
			}
			verify(t, b, clk.Now())
			continue
		}
		counts[reason]++
		if reason != ReasonRenewCert {
			order = append(order, reason)
		}
		// The API server still holds the previous bundle until the patch:
		// the newly served chain must verify against it too.
		if reason != ReasonRotateCA {
			old := *next
			old.CABundle = b.CABundle
			verify(t, &old, clk.Now())
		} else if string(next.Cert) != string(b.Cert) {
			t.Fatal("the serving certificate changed in the same step as the CA")
		}
		b = next
		verify(t, b, clk.Now())
		if n := len(parseAll(b.CABundle)); n > 2 {
			t.Fatalf("bundle holds %d CAs", n)
		}
	}
	if counts[ReasonNew] != 0 {
		t.Errorf("started over %d times; a healthy bundle must only be renewed", counts[ReasonNew])
	}
	if counts[ReasonRotateCA] < 2 || counts[ReasonReissue] < counts[ReasonRotateCA]-1 || counts[ReasonRenewCert] < 10 {
		t.Errorf("renewals %v", counts)
	}
	for i, r := range order {
		if r == ReasonReissue && (i == 0 || order[i-1] != ReasonRotateCA) {
			t.Errorf("reissue not preceded by a CA rotation: %v", order)
		}
	}
}

func TestNextRenewsExpiredLeafAtOnceAndAddsMissingName(t *testing.T) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	b, _, _ := Next(now, nil, testCfg)
	later := now.Add(testCfg.CertValidity + time.Hour)
	next, reason, err := Next(later, b, testCfg)
	if err != nil || reason != ReasonRenewCert {
		t.Fatalf("expired leaf: reason %q err %v", reason, err)
	}
	verify(t, next, later)
	if string(next.CACert) != string(b.CACert) {
		t.Error("renewing the serving certificate changed the CA")
	}
	more := testCfg
	more.DNSNames = append([]string{"other.heatsink-system.svc"}, names...)
	next2, reason, err := Next(later, next, more)
	if err != nil || reason != ReasonRenewCert {
		t.Fatalf("new DNS name: reason %q err %v", reason, err)
	}
	if leaf, _ := parseCert(next2.Cert); leaf.VerifyHostname("other.heatsink-system.svc") != nil {
		t.Error("new name not in the certificate")
	}
}

// TestBundleServesTLS checks the bundle end to end: a TLS server with the
// serving certificate, a client trusting only the CA bundle and naming the
// Service, as the API server calls a webhook.
func TestBundleServesTLS(t *testing.T) {
	b, _, err := Next(time.Now(), nil, testCfg)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := b.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.CABundle)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: names[0]}}}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("a client trusting the CA bundle cannot call the server: %v", err)
	}
	_ = resp.Body.Close()
	c = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: names[0]}}}
	if _, err := c.Get(srv.URL); err == nil {
		t.Fatal("a client with the system roots trusted the self-signed certificate")
	}
}

// FuzzNext feeds Next arbitrary Secret contents (a Secret anyone with access
// could have edited): it must never panic, and whatever it returns must
// verify.
func FuzzNext(f *testing.F) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	good, _, err := Next(now, nil, testCfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good.CACert, good.CAKey, good.Cert, good.Key, good.CABundle)
	f.Add([]byte{}, []byte{}, []byte{}, []byte{}, []byte{})
	f.Add(good.Cert, good.Key, good.CACert, good.CAKey, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, caCert, caKey, cert, key, bundle []byte) {
		cur := FromData(map[string][]byte{KeyCACert: caCert, KeyCAKey: caKey, KeyCert: cert, KeyKey: key, KeyCABundle: bundle})
		next, _, err := Next(now, cur, testCfg)
		if err != nil {
			t.Fatal(err)
		}
		verify(t, next, now)
	})
}
