package wsframe

import (
	"crypto/sha1" //nolint:gosec // G505: RFC 6455 4.2.2 defines the accept key with SHA-1
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// upgradeError is a refused handshake: the status and body
// websocket.Accept answers with, and whether it adds headers.
type upgradeError struct {
	status int
	msg    string
	// upgrade: Connection and Upgrade headers; version: Sec-WebSocket-Version.
	upgrade, version bool
}

func (e *upgradeError) Error() string { return e.msg }

// checkUpgrade checks a handshake request as websocket.Accept does
// (verifyClientRequest, in its order): HTTP/1.1 or later, Connection
// holding the token Upgrade and Upgrade the token websocket (426), GET
// (405), Sec-WebSocket-Version 13, one Sec-WebSocket-Key of 16 bytes in
// base64 (400). It returns nil for a request Accept upgrades, else the
// status and the body Accept writes.
func checkUpgrade(r *http.Request) *upgradeError {
	if !r.ProtoAtLeast(1, 1) {
		return &upgradeError{status: http.StatusUpgradeRequired,
			msg: fmt.Sprintf("WebSocket protocol violation: handshake request must be at least HTTP/1.1: %q", r.Proto)}
	}
	if !hasToken(r.Header, "Connection", "Upgrade") {
		return &upgradeError{status: http.StatusUpgradeRequired, upgrade: true,
			msg: fmt.Sprintf("WebSocket protocol violation: Connection header %q does not contain Upgrade", r.Header.Get("Connection"))}
	}
	if !hasToken(r.Header, "Upgrade", "websocket") {
		return &upgradeError{status: http.StatusUpgradeRequired, upgrade: true,
			msg: fmt.Sprintf("WebSocket protocol violation: Upgrade header %q does not contain websocket", r.Header.Get("Upgrade"))}
	}
	if r.Method != http.MethodGet {
		return &upgradeError{status: http.StatusMethodNotAllowed,
			msg: fmt.Sprintf("WebSocket protocol violation: handshake request method is not GET but %q", r.Method)}
	}
	if v := r.Header.Get("Sec-WebSocket-Version"); v != "13" {
		return &upgradeError{status: http.StatusBadRequest, version: true,
			msg: fmt.Sprintf("unsupported WebSocket protocol version (only 13 is supported): %q", v)}
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	switch len(keys) {
	case 0:
		return &upgradeError{status: http.StatusBadRequest, msg: errMissingKey.Error()}
	case 1:
	default:
		return &upgradeError{status: http.StatusBadRequest, msg: errManyKeys.Error()}
	}
	key := strings.TrimSpace(keys[0])
	if v, err := base64.StdEncoding.DecodeString(key); err != nil || len(v) != 16 {
		return &upgradeError{status: http.StatusBadRequest,
			msg: fmt.Sprintf("WebSocket protocol violation: invalid Sec-WebSocket-Key %q, must be a 16 byte base64 encoded string", key)}
	}
	return nil
}

var (
	errMissingKey = errors.New("WebSocket protocol violation: missing Sec-WebSocket-Key")
	errManyKeys   = errors.New("WebSocket protocol violation: multiple Sec-WebSocket-Key headers")
)

// hasToken reports whether a comma-separated token of h's values for key
// is token, ignoring case (coder/websocket's headerContainsTokenIgnoreCase).
func hasToken(h http.Header, key, token string) bool {
	for _, v := range h[textproto.CanonicalMIMEHeaderKey(key)] {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// Refuse answers r as websocket.Accept does when it refuses it
// (the headers Accept sets, then http.Error with its message) and reports
// whether it refused; it writes nothing for a request Accept upgrades.
func Refuse(w http.ResponseWriter, r *http.Request) bool {
	e := checkUpgrade(r)
	if e == nil {
		return false
	}
	if e.upgrade {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
	}
	if e.version {
		w.Header().Set("Sec-WebSocket-Version", "13")
	}
	http.Error(w, e.msg, e.status)
	return true
}

// AcceptKey is the Sec-WebSocket-Accept value for the Sec-WebSocket-Key
// secKey (RFC 6455 4.2.2). websocket.Accept hashes the header's value as
// Header.Get returns it, untrimmed.
func AcceptKey(secKey string) string {
	h := sha1.New() //nolint:gosec // G401: see the import
	h.Write([]byte(secKey))
	h.Write([]byte("258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// AppendAcceptResponse appends the 101 response head that wsnode sends
// for a request Refuse lets through, with websocket.Accept's headers
// (compression off, no subprotocol) written as http.Header.Write writes
// them (sorted, canonical names): the head pkg/wsfront builds from the
// headers Accept set. secKey is r.Header.Get("Sec-WebSocket-Key").
func AppendAcceptResponse(dst []byte, secKey string) []byte {
	dst = append(dst, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nSec-Websocket-Accept: "...)
	dst = append(dst, AcceptKey(secKey)...)
	return append(dst, "\r\nUpgrade: websocket\r\n\r\n"...)
}
