// Package listentest makes the certificates of TLS tests: a CA made for
// the test, and server and client certificates it signs, written as PEM
// files.
package listentest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte // the CA certificate
	dir  string
}

// serial numbers the certificates, so that a test tells them apart.
var serial atomic.Int64

func nextSerial() *big.Int { return big.NewInt(serial.Add(1)) }

// NewCA returns a self-signed CA whose files go into a temporary
// directory of t.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, cert, der := sign(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil)
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), dir: t.TempDir()}
}

// sign makes a key and a certificate from tmpl (its serial number and a
// validity from an hour ago to a day from now added) signed by ca, or
// self-signed when ca is nil.
func sign(t testing.TB, tmpl *x509.Certificate, ca *CA) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = nextSerial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	parent, parentKey := tmpl, key
	if ca != nil {
		parent, parentKey = ca.Cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

// Pool returns a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// File writes the CA certificate to a file and returns its path.
func (ca *CA) File(t testing.TB) string {
	t.Helper()
	return write(t, filepath.Join(ca.dir, "ca.pem"), ca.PEM)
}

// Issued is a certificate the CA signed, with its key.
type Issued struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// TLS returns the certificate for a tls.Config.
func (c *Issued) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	kp, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// WriteTo writes the certificate and key to cert and key (replacing
// them: each through a temporary file and a rename, as tools that renew
// certificates do).
func (c *Issued) WriteTo(t testing.TB, cert, key string) {
	t.Helper()
	write(t, key, c.KeyPEM)
	write(t, cert, c.CertPEM)
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB) *Issued {
	return ca.issue(t, "localhost", x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate for name.
func (ca *CA) Client(t testing.TB, name string) *Issued {
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, cn string, usage x509.ExtKeyUsage) *Issued {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	key, cert, der := sign(t, tmpl, ca)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Issued{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}
}

// Files writes the certificate and key into dir and returns their paths.
func (c *Issued) Files(t testing.TB, dir, name string) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	c.WriteTo(t, cert, key)
	return cert, key
}

func write(t testing.TB, path string, b []byte) string {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}
