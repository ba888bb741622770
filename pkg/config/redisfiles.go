package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// The files below are read at validation, so a missing or bad one stops
// the binary before any dial, and again by redisx whenever they change.

// LoadRedisCA reads a PEM file of one or more CA certificates
// (--redis-tls-ca); notAfter is the earliest expiry among them, the one
// an alert must see.
func LoadRedisCA(path string) (pool *x509.CertPool, notAfter time.Time, err error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's --redis-tls-ca setting
	if err != nil {
		return nil, time.Time{}, err
	}
	pool = x509.NewCertPool()
	for n := 1; ; n++ {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			if notAfter.IsZero() {
				return nil, time.Time{}, fmt.Errorf("%s holds no PEM certificate", path)
			}
			return pool, notAfter, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%s: certificate %d: %w", path, n, err)
		}
		pool.AddCert(cert)
		if notAfter.IsZero() || cert.NotAfter.Before(notAfter) {
			notAfter = cert.NotAfter
		}
	}
}

// LoadRedisCert reads a client certificate and its key (--redis-tls-cert,
// --redis-tls-key); its Leaf is set.
func LoadRedisCert(certFile, keyFile string) (tls.Certificate, error) {
	return tls.LoadX509KeyPair(certFile, keyFile)
}

// ReadRedisPassword reads a password file (--redis-password-file): its
// content less one trailing newline, which editors and `echo` add.
func ReadRedisPassword(path string) (string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's --redis-password-file setting
	if err != nil {
		return "", err
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pw == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return pw, nil
}

// checkTLSFiles loads the TLS files the settings name, as redisx will,
// and reports every problem.
func (c Common) checkTLSFiles() []error {
	var errs []error
	if c.RedisTLSCA != "" {
		if _, _, err := LoadRedisCA(c.RedisTLSCA); err != nil {
			errs = append(errs, fmt.Errorf("--redis-tls-ca: %w", err))
		}
	}
	switch {
	case c.RedisTLSCert != "" && c.RedisTLSKey != "":
		if _, err := LoadRedisCert(c.RedisTLSCert, c.RedisTLSKey); err != nil {
			errs = append(errs, fmt.Errorf("--redis-tls-cert, --redis-tls-key: %w", err))
		}
	case c.RedisTLSCert != "":
		errs = append(errs, errors.New("--redis-tls-cert: set without --redis-tls-key: a client certificate needs its key"))
	case c.RedisTLSKey != "":
		errs = append(errs, errors.New("--redis-tls-key: set without --redis-tls-cert: a client key needs its certificate"))
	}
	return errs
}
