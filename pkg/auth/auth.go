package auth

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/protocol"
)

// MaxSkew is how far auth_timestamp may be from the server's clock, either
// way, as Pusher allows.
const MaxSkew = 600 * time.Second

// Version is the only auth_version Pusher defines.
const Version = "1.0"

// Error is an authentication failure. Its message is meant for the client
// (HTTP 401 body, pusher:subscription_error) and says why.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// failf builds an *Error. Messages start with a capital letter and keep
// Pusher's wording, because clients show them as-is.
func failf(format string, args ...any) *Error {
	return &Error{msg: fmt.Sprintf(format, args...)}
}

// Sign returns the lowercase hex HMAC-SHA256 of msg keyed with secret: the
// signature every Pusher auth scheme uses.
func Sign(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// BodyMD5 returns the lowercase hex MD5 of body, as body_md5 carries it.
func BodyMD5(body []byte) string {
	sum := md5.Sum(body)
	return hex.EncodeToString(sum[:])
}

// equal compares in constant time (for strings of equal length), so a
// caller cannot learn a signature byte by byte from response times.
func equal(a, b string) bool { return hmac.Equal([]byte(a), []byte(b)) }

// ParseQuery decodes a raw query string the way Pusher clients write it.
// Unlike url.ParseQuery it splits pairs on '&' only: ';' is a legal
// channel-name character and clients send values unescaped, so
// filter_by_prefix=a;b must reach the handler (and the signature check)
// whole. Keys and values are percent-decoded, '+' as a space.
func ParseQuery(raw string) (url.Values, error) {
	q := url.Values{}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("query parameter %q: %w", k, err)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("query parameter %q: %w", key, err)
		}
		q[key] = append(q[key], val)
	}
	return q, nil
}

// StringToSign returns what a signed HTTP API request signs:
// "METHOD\npath\nquery", where query holds every parameter except
// auth_signature, keys lowercased and sorted, written k=v, joined with '&'
// and not URL-escaped. Each key must appear once and hold no '&' or '=',
// and no value may hold '&' (see signedParams); otherwise two different
// queries can sign the same string.
func StringToSign(method, path string, params map[string]string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		if k != "auth_signature" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(strings.ToUpper(method))
	b.WriteByte('\n')
	b.WriteString(path)
	b.WriteByte('\n')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(params[k])
	}
	return b.String()
}

// SignRequest returns query with auth_key, auth_timestamp, auth_version,
// body_md5 (when body is not empty) and auth_signature set, as a Pusher
// client would send it. Tests and future server-to-server calls use it.
func SignRequest(method, path string, query url.Values, body []byte, key, secret string, now time.Time) url.Values {
	q := url.Values{}
	for k, vs := range query {
		q[k] = append([]string(nil), vs...)
	}
	q.Set("auth_key", key)
	q.Set("auth_timestamp", strconv.FormatInt(now.Unix(), 10))
	q.Set("auth_version", Version)
	if len(body) > 0 {
		q.Set("body_md5", BodyMD5(body))
	}
	params := make(map[string]string, len(q))
	for k, vs := range q {
		params[strings.ToLower(k)] = vs[len(vs)-1]
	}
	q.Set("auth_signature", Sign(secret, StringToSign(method, path, params)))
	return q
}

// signedParams returns the parameters of query as StringToSign takes them,
// keys lowercased, or an *Error if the string to sign would not bind them.
//
// The string to sign writes each parameter k=v, joined with '&', without
// escaping, so it can be read back unambiguously only if no key holds '&'
// or '=' and no value holds '&'. Otherwise two different requests sign the
// same string: "filter_by_prefix=presence-&info=user_count" and the single
// parameter filter_by_prefix=presence-%26info%3Duser_count, and a signature
// for the first would pass for the second. Such parameters are refused;
// clients never send them, because the SDKs put values into the URL
// unescaped, where an '&' would split the value anyway. A value may hold
// '=' (channel names may): the first '=' of a pair ends its key, so the
// reading stays unique. A key given twice, even in different case, is
// refused too, as the string to sign holds only one of them.
func signedParams(query url.Values) (map[string]string, error) {
	params := make(map[string]string, len(query))
	for k, vs := range query {
		lk := strings.ToLower(k)
		if _, dup := params[lk]; dup || len(vs) != 1 {
			return nil, failf("Duplicate query parameter %s: each parameter may appear only once", strconv.Quote(lk))
		}
		if strings.ContainsAny(lk, "&=") {
			return nil, failf("Ambiguous query parameter %s: signature ambiguous, a key may not contain '&' or '=' once decoded, as the string to sign does not escape them", strconv.Quote(lk))
		}
		if strings.Contains(vs[0], "&") {
			return nil, failf("Ambiguous query parameter %s: signature ambiguous, a value may not contain '&' once decoded, as the string to sign does not escape it", strconv.Quote(lk))
		}
		params[lk] = vs[0]
	}
	return params, nil
}

// SignedQuery is a request whose query signature holds: only its body is
// left to check, against the body_md5 the signature covers.
type SignedQuery struct {
	bodyMD5 string
	hasMD5  bool
}

// VerifyQuery checks a signed Pusher HTTP API request for app, all but its
// body: parameters, key, version, timestamp and the signature over method,
// path and query. path is the request path as the client signed it (no
// mount prefix), query its decoded parameters (see ParseQuery). It returns
// an *Error saying why the request is refused. body_md5 is one of the
// signed parameters, so a server can refuse a forged or stale request
// before reading a byte of its body (SignedQuery.CheckLength), and read
// only the bodies of callers who hold the secret (SignedQuery.CheckBody).
//
// A parameter given twice, even in different case, is refused: the server
// would otherwise act on a value other than the one that was signed. So is
// a parameter whose decoded key holds '&' or '=', or whose decoded value
// holds '&' (see signedParams).
func VerifyQuery(method, path string, query url.Values, app *apps.App, now time.Time) (SignedQuery, error) {
	params, err := signedParams(query)
	if err != nil {
		return SignedQuery{}, err
	}
	for _, name := range []string{"auth_key", "auth_timestamp", "auth_version", "auth_signature"} {
		if _, ok := params[name]; !ok {
			return SignedQuery{}, failf("Missing %s: signed requests carry auth_key, auth_timestamp, auth_version and auth_signature", name)
		}
	}
	secret, ok := app.SecretFor(params["auth_key"])
	if !ok {
		return SignedQuery{}, failf("Invalid auth_key: %s is not a key of app %s", strconv.Quote(params["auth_key"]), strconv.Quote(app.ID))
	}
	if v := params["auth_version"]; v != Version {
		return SignedQuery{}, failf("Invalid auth_version: %s is not supported (use %s)", strconv.Quote(v), Version)
	}
	ts, err := strconv.ParseInt(params["auth_timestamp"], 10, 64)
	if err != nil {
		return SignedQuery{}, failf("Invalid auth_timestamp: %s is not Unix time in seconds", strconv.Quote(params["auth_timestamp"]))
	}
	// Compare in seconds without converting ts to a time.Time, which would
	// overflow for absurd values.
	if skew := now.Unix() - ts; skew > int64(MaxSkew/time.Second) || skew < -int64(MaxSkew/time.Second) {
		return SignedQuery{}, failf("Timestamp expired: Given timestamp (%d) not within %ds of server time (%d)", ts, int64(MaxSkew/time.Second), now.Unix())
	}
	toSign := StringToSign(method, path, params)
	if sig := params["auth_signature"]; !equal(Sign(secret, toSign), sig) {
		return SignedQuery{}, failf("Invalid signature: Expected HMAC SHA256 hex digest of %s, but got %s", strconv.Quote(toSign), strconv.Quote(sig))
	}
	md5, has := params["body_md5"]
	return SignedQuery{bodyMD5: md5, hasMD5: has}, nil
}

// CheckBody checks the request's body against the signed body_md5. It is
// checked after the signature: once the signature holds, body_md5 is the
// client's, and a mismatch means the body was altered. A body without a
// signed body_md5 is refused: it would be unsigned.
func (s SignedQuery) CheckBody(body []byte) error {
	switch {
	case !s.hasMD5 && len(body) > 0:
		return missingBodyMD5()
	case s.hasMD5 && !equal(BodyMD5(body), s.bodyMD5):
		return failf("Invalid body_md5: Expected %s (MD5 hex digest of the %d-byte body), but got %s", BodyMD5(body), len(body), strconv.Quote(s.bodyMD5))
	}
	return nil
}

// CheckLength refuses, before its body is read, a request announcing a
// body of n bytes (its Content-Length; -1 when unknown) that the signature
// does not cover. CheckBody still has the last word.
func (s SignedQuery) CheckLength(n int64) error {
	if !s.hasMD5 && n > 0 {
		return missingBodyMD5()
	}
	return nil
}

func missingBodyMD5() *Error {
	return failf("Missing body_md5: required when the request has a body")
}

// ChannelAuthString returns what a channel auth value signs: for presence
// channels "socket_id:channel:channel_data" (channel_data exactly as
// received), for the others "socket_id:channel". A presence subscription
// without channel_data (the member comes from pusher:signin) is signed like
// a private one, as the server SDKs sign it when given no presence data.
func ChannelAuthString(socketID, channel, channelData string) string {
	if channelData != "" && protocol.ChannelKind(channel).HasMembers() {
		return socketID + ":" + channel + ":" + channelData
	}
	return socketID + ":" + channel
}

// CheckChannelAuth checks the auth value ("<app key>:<hex signature>") a
// socket sent to subscribe to a private, private-encrypted or presence
// channel.
func CheckChannelAuth(app *apps.App, socketID, channel, channelData, authValue string) error {
	return checkAuthValue(app, ChannelAuthString(socketID, channel, channelData), authValue)
}

// CheckSigninAuth checks the auth value of pusher:signin, which signs
// "socket_id::user::user_data" with user_data exactly as received.
func CheckSigninAuth(app *apps.App, socketID, userData, authValue string) error {
	return checkAuthValue(app, socketID+"::user::"+userData, authValue)
}

func checkAuthValue(app *apps.App, msg, authValue string) error {
	key, sig, ok := strings.Cut(authValue, ":")
	if !ok {
		return failf("Invalid auth value %s: expected <app key>:<signature>", strconv.Quote(authValue))
	}
	secret, known := app.SecretFor(key)
	if !known {
		return failf("Invalid key in auth value: %s is not a key of app %s", strconv.Quote(key), strconv.Quote(app.ID))
	}
	if !equal(Sign(secret, msg), sig) {
		return failf("Invalid signature: Expected HMAC SHA256 hex digest of %s, but got %s", strconv.Quote(msg), strconv.Quote(sig))
	}
	return nil
}
