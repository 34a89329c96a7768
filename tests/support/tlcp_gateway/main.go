// Command tlcp_gateway is the test stand-in for a certified TLCP gateway (GB/T 38636) in
// front of xinserve: it terminates TLCP with SM2 double certificates (sign + enc) using
// github.com/tjfoc/gmsm/gmtls, requires and verifies the client's SM2 certificate, and
// forwards gRPC (HTTP/2, h2c) to xinserve's trusted-proxy unix socket with the client's
// identity in an Envoy-style x-forwarded-client-cert header. It also issues the SM2 test
// certificates and runs a TLCP gRPC client through the gateway.
//
//	tlcp_gateway certs DIR
//	tlcp_gateway gateway -certs DIR -listen 127.0.0.1:0 -upstream /path/to.sock -by URI
//	tlcp_gateway client -certs DIR -addr HOST:PORT -method /pkg.Service/Method -request-id ID [-forge XFCC]
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tjfoc/gmsm/gmtls"
	"github.com/tjfoc/gmsm/sm2"
	"github.com/tjfoc/gmsm/x509"
)

const serverName = "tlcp-gateway.test"

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: tlcp_gateway certs|gateway|client ...")
	}
	switch os.Args[1] {
	case "certs":
		if len(os.Args) != 3 {
			log.Fatal("usage: tlcp_gateway certs DIR")
		}
		if err := writeCerts(os.Args[2]); err != nil {
			log.Fatal(err)
		}
	case "gateway":
		fs := flag.NewFlagSet("gateway", flag.ExitOnError)
		dir := fs.String("certs", "", "directory of the SM2 certificates")
		listen := fs.String("listen", "127.0.0.1:0", "TLCP listen address")
		upstream := fs.String("upstream", "", "xinserve's trusted-proxy unix socket")
		by := fs.String("by", "", "the gateway's own identity (XFCC By)")
		_ = fs.Parse(os.Args[2:])
		if err := gateway(*dir, *listen, *upstream, *by); err != nil {
			log.Fatal(err)
		}
	case "client":
		fs := flag.NewFlagSet("client", flag.ExitOnError)
		dir := fs.String("certs", "", "directory of the SM2 certificates")
		addr := fs.String("addr", "", "the gateway's address")
		method := fs.String("method", "", "gRPC method path")
		rid := fs.String("request-id", "", "x-request-id")
		forge := fs.String("forge", "", "an x-forwarded-client-cert value the client sends itself")
		_ = fs.Parse(os.Args[2:])
		if err := client(*dir, *addr, *method, *rid, *forge); err != nil {
			log.Fatal(err)
		}
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

// --- certificates ---------------------------------------------------------------------

type issued struct {
	cert *x509.Certificate
	key  *sm2.PrivateKey
}

func issue(dir, name string, tmpl *x509.Certificate, parent *issued) (*issued, error) {
	key, err := sm2.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 63))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-5 * time.Minute)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.SignatureAlgorithm = x509.SM2WithSM3
	parentCert, signer := tmpl, key
	if parent != nil {
		parentCert, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(tmpl, parentCert, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := x509.WritePrivateKeyToPem(key, nil)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), keyPEM, 0o600); err != nil {
		return nil, err
	}
	return &issued{cert, key}, nil
}

// writeCerts issues an SM2 CA, the gateway's sign and enc certificates and a client
// certificate (CN=teller-7,O=Bank,C=CN), and prints the client's subject and SHA-256.
func writeCerts(dir string) error {
	ca, err := issue(dir, "ca", &x509.Certificate{
		Subject:               pkix.Name{Country: []string{"CN"}, Organization: []string{"Test"}, CommonName: "TLCP test SM2 CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, nil)
	if err != nil {
		return err
	}
	gw := pkix.Name{Country: []string{"CN"}, Organization: []string{"Test"}, CommonName: serverName}
	if _, err := issue(dir, "gateway_sign", &x509.Certificate{
		Subject: gw, DNSNames: []string{serverName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca); err != nil {
		return err
	}
	if _, err := issue(dir, "gateway_enc", &x509.Certificate{
		Subject: gw, DNSNames: []string{serverName},
		KeyUsage:    x509.KeyUsageKeyEncipherment | x509.KeyUsageDataEncipherment | x509.KeyUsageKeyAgreement,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca); err != nil {
		return err
	}
	client, err := issue(dir, "client", &x509.Certificate{
		Subject:     pkix.Name{Country: []string{"CN"}, Organization: []string{"Bank"}, CommonName: "teller-7"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(client.cert.Raw)
	return json.NewEncoder(os.Stdout).Encode(map[string]string{
		"client_subject": client.cert.Subject.String(),
		"client_sha256":  hex.EncodeToString(sum[:]),
	})
}

func pool(dir string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in ca.pem")
	}
	return p, nil
}

func keyPair(dir, name string) (gmtls.Certificate, error) {
	return gmtls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key"))
}

// --- the gateway ----------------------------------------------------------------------

type connKey struct{}

func gateway(dir, listen, upstream, by string) error {
	sign, err := keyPair(dir, "gateway_sign")
	if err != nil {
		return err
	}
	enc, err := keyPair(dir, "gateway_enc")
	if err != nil {
		return err
	}
	roots, err := pool(dir)
	if err != nil {
		return err
	}
	config := &gmtls.Config{
		GMSupport:    &gmtls.GMSupport{},
		Certificates: []gmtls.Certificate{sign, enc},
		ClientAuth:   gmtls.RequireAndVerifyClientCert,
		ClientCAs:    roots,
	}
	ln, err := gmtls.Listen("tcp", listen, config)
	if err != nil {
		return err
	}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	transport := &http.Transport{
		Protocols: &h2c,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", upstream)
		},
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "xinserve"})
			// A client never chooses its own forwarded identity: sanitise, then set.
			r.Out.Header.Del("X-Forwarded-Client-Cert")
			conn := r.In.Context().Value(connKey{}).(*gmtls.Conn)
			peer := conn.ConnectionState().PeerCertificates[0]
			sum := sha256.Sum256(peer.Raw)
			subject := strings.ReplaceAll(peer.Subject.String(), `"`, `\"`)
			r.Out.Header.Set("X-Forwarded-Client-Cert",
				fmt.Sprintf(`By=%s;Hash=%s;Subject="%s"`, by, hex.EncodeToString(sum[:]), subject))
		},
		Transport:     transport,
		FlushInterval: -1,
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	server := &http.Server{
		Handler:   proxy,
		Protocols: &protocols,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ErrorLog: log.New(os.Stderr, "gateway: ", 0),
	}
	fmt.Printf("LISTENING %s\n", ln.Addr())
	return server.Serve(ln)
}

// --- the TLCP client -------------------------------------------------------------------

func client(dir, addr, method, rid, forge string) error {
	cert, err := keyPair(dir, "client")
	if err != nil {
		return err
	}
	roots, err := pool(dir)
	if err != nil {
		return err
	}
	config := &gmtls.Config{
		GMSupport:    &gmtls.GMSupport{},
		RootCAs:      roots,
		Certificates: []gmtls.Certificate{cert},
		ServerName:   serverName,
	}
	var state gmtls.ConnectionState
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	transport := &http.Transport{
		Protocols: &h2c,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := gmtls.Dial("tcp", addr, config)
			if err != nil {
				return nil, err
			}
			if err := conn.Handshake(); err != nil {
				return nil, err
			}
			state = conn.ConnectionState()
			return conn, nil
		},
	}
	// An empty request message, framed as gRPC does: flag 0, length 0.
	req, err := http.NewRequest(http.MethodPost, "http://"+serverName+method, strings.NewReader("\x00\x00\x00\x00\x00"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("X-Request-Id", rid)
	if forge != "" {
		req.Header.Set("X-Forwarded-Client-Cert", forge)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := (&http.Client{Transport: transport}).Do(req.WithContext(ctx))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(bufio.NewReader(resp.Body))
	resp.Body.Close()
	if err != nil {
		return err
	}
	status := resp.Trailer.Get("Grpc-Status")
	message := resp.Trailer.Get("Grpc-Message")
	if status == "" { // a trailers-only reply
		status, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"http_status":  resp.StatusCode,
		"grpc_status":  status,
		"grpc_message": message,
		"body_bytes":   len(body),
		"version":      fmt.Sprintf("0x%04x", state.Version),
		"cipher_suite": fmt.Sprintf("0x%04x", state.CipherSuite),
	})
}
