package redistest

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority that keeps its key, to issue new
// certificates while a test runs: a rotation.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, as a CA bundle file holds it.
	PEM []byte
}

// NewCA makes a CA valid for lifetime.
func NewCA(t testing.TB, name string, lifetime time.Duration) *CA {
	t.Helper()
	key, der := newCert(t, name, nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		c.NotAfter = time.Now().Add(lifetime)
	})
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issued is a certificate a CA signed, with a new key of its own.
type Issued struct {
	Cert     *x509.Certificate
	PEM, Key []byte
}

// Issue signs a new key's certificate valid for lifetime: a server's for
// 127.0.0.1 and localhost, or a client's.
func (ca *CA) Issue(t testing.TB, server bool, lifetime time.Duration) *Issued {
	t.Helper()
	key, der := newCert(t, fmt.Sprintf("headcount test %s (server %v)", ca.Cert.Subject.CommonName, server), ca.Cert, ca.key, func(c *x509.Certificate) {
		c.KeyUsage = x509.KeyUsageDigitalSignature
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		if server {
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			c.IPAddresses, c.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}
		}
		c.NotAfter = time.Now().Add(lifetime)
	})
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	b, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Issued{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b})}
}

// SecretDir is a directory laid out as the kubelet lays out a mounted
// Secret: each file a symlink through ..data to a timestamped directory,
// all replaced at once by renaming a new ..data symlink over the old.
type SecretDir struct {
	Dir string
	n   int
}

// NewSecretDir returns an empty secret directory.
func NewSecretDir(t testing.TB) *SecretDir {
	t.Helper()
	return &SecretDir{Dir: t.TempDir()}
}

// Path returns the path a reader uses for name.
func (d *SecretDir) Path(name string) string { return filepath.Join(d.Dir, name) }

// Write replaces the directory's content with files, atomically, as a
// Secret update does.
func (d *SecretDir) Write(t testing.TB, files map[string][]byte) {
	t.Helper()
	d.n++
	ts := fmt.Sprintf("..%d", d.n)
	if err := os.Mkdir(filepath.Join(d.Dir, ts), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(d.Dir, ts, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		// A symlink that already exists points through ..data already.
		if err := os.Symlink(filepath.Join("..data", name), d.Path(name)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(d.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
}
