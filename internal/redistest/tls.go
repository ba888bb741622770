package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/proctest"
)

// TLSFiles are PEM files a test made: a CA, a server certificate for
// 127.0.0.1 and localhost and a client certificate, both signed by the CA,
// and their keys.
type TLSFiles struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// ClientConfig returns a TLS configuration that trusts the CA and presents
// the client certificate.
func (f *TLSFiles) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// NewTLSFiles makes a fresh CA and the certificates it signs, valid for an
// hour, in a temporary directory.
func NewTLSFiles(t testing.TB) *TLSFiles {
	t.Helper()
	dir := t.TempDir()
	caKey, caDER := newCert(t, "headcount test CA", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	})
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	f := &TLSFiles{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	for _, leaf := range []struct {
		name       string
		usage      x509.ExtKeyUsage
		cert, key  *string
		ip, domain bool
	}{
		{"server", x509.ExtKeyUsageServerAuth, &f.ServerCert, &f.ServerKey, true, true},
		{"client", x509.ExtKeyUsageClientAuth, &f.ClientCert, &f.ClientKey, false, false},
	} {
		key, der := newCert(t, "headcount test "+leaf.name, ca, caKey, func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{leaf.usage}
			c.KeyUsage = x509.KeyUsageDigitalSignature
			if leaf.ip {
				c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			}
			if leaf.domain {
				c.DNSNames = []string{"localhost"}
			}
		})
		*leaf.cert = filepath.Join(dir, leaf.name+".pem")
		*leaf.key = filepath.Join(dir, leaf.name+"-key.pem")
		writePEM(t, *leaf.cert, "CERTIFICATE", der)
		b, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, *leaf.key, "PRIVATE KEY", b)
	}
	return f
}

// newCert makes a key and a certificate for it, signed by parent (self
// signed when parent is nil).
func newCert(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, edit func(*x509.Certificate)) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
	}
	edit(tmpl)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TLSServer is a redis-server that listens with TLS only.
type TLSServer struct {
	*Server
	Files *TLSFiles
}

// URL returns the server's rediss:// URL (db 0).
func (s *TLSServer) URL() string { return "rediss://" + s.Addr + "/0" }

// NewTLS starts a redis-server on a free loopback port that speaks TLS only
// (no plain port), with the certificates of files. authClients is
// redis-server's tls-auth-clients: "yes" requires a client certificate,
// "optional" asks for one; extra are more redis-server arguments.
func NewTLS(t testing.TB, files *TLSFiles, authClients string, extra ...string) *TLSServer {
	t.Helper()
	dir := t.TempDir()
	port := proctest.FreePort(t)
	args := append([]string{
		"--bind", "127.0.0.1", "--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", files.ServerCert, "--tls-key-file", files.ServerKey,
		"--tls-ca-cert-file", files.CA, "--tls-auth-clients", authClients,
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--protected-mode", "no", "--loglevel", "warning",
	}, extra...)
	cmd := exec.Command(Binary(t), args...)
	logFile := filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server with TLS: %v", err)
	}
	s := &TLSServer{Server: &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir}, Files: files}
	t.Cleanup(func() { s.Kill(); _ = out.Close() })
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: files.ClientConfig(t), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("redis-server with TLS on %s did not answer (is it built with TLS? `redis-server --version`): %v\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// AdminClient returns a client on one connection, kept for the whole
// test, that presents a certificate of ca valid for 10 hours: it outlives
// the rotations a test makes (existing connections survive them, and
// CLIENT KILL skips its caller). Closed when the test ends.
func (s *TLSServer) AdminClient(t testing.TB, ca *CA) *redis.Client {
	t.Helper()
	cfg := s.Files.ClientConfig(t)
	cert := ca.Issue(t, false, 10*time.Hour)
	var err error
	if cfg.Certificates[0], err = tls.X509KeyPair(cert.PEM, cert.Key); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: cfg, PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Client returns a client that trusts the test CA and presents the client
// certificate, closed when the test ends.
func (s *TLSServer) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.Files.ClientConfig(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
