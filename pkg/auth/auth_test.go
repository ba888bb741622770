package auth

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
)

// verify checks a request as httpapi's handler does: the query's
// signature, then the length the request announces (here, the body's),
// then the body it read.
func verify(method, path string, q url.Values, body []byte, app *apps.App, now time.Time) error {
	sq, err := VerifyQuery(method, path, q, app, now)
	if err == nil {
		err = sq.CheckLength(int64(len(body)))
	}
	if err == nil {
		err = sq.CheckBody(body)
	}
	return err
}

// The vectors of the signature examples in Pusher's docs, recomputed
// with Python's hmac and hashlib.
var docApp = &apps.App{ID: "3", Key: "278d425bdf160c739803", Secret: "7ad3773142a6692b25b8", Enabled: true}

const (
	docBody      = `{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}`
	docTimestamp = 1353088179
)

func TestSignVectors(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{"1234.1234:private-foobar", "58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"},
		{`1234.1234::user::{"id":"12345"}`, "4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba"},
		{`1234.1234:presence-foobar:{"user_id":10,"user_info":{"name":"Mr. Channels"}}`, "31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"},
		{"POST\n/apps/3/events\nauth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f",
			"da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"},
	} {
		require.Equal(t, tc.want, Sign(docApp.Secret, tc.msg), tc.msg)
	}
	require.Equal(t, "ec365a775a4cd0599faeb73354201b6f", BodyMD5([]byte(docBody)))
}

func docQuery() url.Values {
	return url.Values{
		"auth_key":       {docApp.Key},
		"auth_timestamp": {"1353088179"},
		"auth_version":   {"1.0"},
		"body_md5":       {"ec365a775a4cd0599faeb73354201b6f"},
		"auth_signature": {"da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"},
	}
}

func TestVerifyDocVector(t *testing.T) {
	at := func(sec int64) time.Time { return time.Unix(sec, 0) }
	require.NoError(t, verify("POST", "/apps/3/events", docQuery(), []byte(docBody), docApp, at(docTimestamp)))
	// The method is signed upper case whatever the request line said.
	require.NoError(t, verify("post", "/apps/3/events", docQuery(), []byte(docBody), docApp, at(docTimestamp)))
	// The window is inclusive: exactly 600 s either way passes.
	require.NoError(t, verify("POST", "/apps/3/events", docQuery(), []byte(docBody), docApp, at(docTimestamp+600)))
	require.NoError(t, verify("POST", "/apps/3/events", docQuery(), []byte(docBody), docApp, at(docTimestamp-600)))

	err := verify("POST", "/apps/3/events", docQuery(), []byte(docBody), docApp, at(docTimestamp+601))
	require.EqualError(t, err, "Timestamp expired: Given timestamp (1353088179) not within 600s of server time (1353088780)")
	err = verify("POST", "/apps/3/events", docQuery(), []byte(docBody), docApp, at(docTimestamp-601))
	require.EqualError(t, err, "Timestamp expired: Given timestamp (1353088179) not within 600s of server time (1353087578)")
}

func TestVerifyUpperCaseKeys(t *testing.T) {
	// Keys are lowercased before signing, so a client may send them in any case.
	q := url.Values{}
	for k, v := range docQuery() {
		q[strings.ToUpper(k)] = v
	}
	require.NoError(t, verify("POST", "/apps/3/events", q, []byte(docBody), docApp, time.Unix(docTimestamp, 0)))
}

func TestVerifyFailures(t *testing.T) {
	now := time.Unix(docTimestamp, 0)
	for _, tc := range []struct {
		name   string
		method string
		path   string
		edit   func(url.Values)
		body   string
		want   string
	}{
		{name: "wrong method", method: "PUT", want: "Invalid signature: Expected HMAC SHA256 hex digest of \"PUT\\n/apps/3/events\\nauth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f\", but got \"da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c\""},
		{name: "wrong path", path: "/apps/4/events", want: `Invalid signature: Expected HMAC SHA256 hex digest of "POST\n/apps/4/events\n`},
		{name: "added parameter", edit: func(q url.Values) { q.Set("info", "user_count") }, want: `&body_md5=ec365a775a4cd0599faeb73354201b6f&info=user_count", but got`},
		{name: "altered signature", edit: func(q url.Values) { q.Set("auth_signature", strings.Repeat("0", 64)) }, want: `but got "0000000000000000000000000000000000000000000000000000000000000000"`},
		{name: "upper-case signature", edit: func(q url.Values) { q.Set("auth_signature", strings.ToUpper(q.Get("auth_signature"))) }, want: "Invalid signature"},
		{name: "altered body", body: strings.Replace(docBody, "foo", "bar", 1), want: `Invalid body_md5: Expected ea638899d86dc2b588567bbf46e6f5b0 (MD5 hex digest of the 68-byte body), but got "ec365a775a4cd0599faeb73354201b6f"`},
		{name: "empty body with body_md5", body: "-", want: `Invalid body_md5: Expected d41d8cd98f00b204e9800998ecf8427e (MD5 hex digest of the 0-byte body)`},
		{name: "wrong key", edit: func(q url.Values) { q.Set("auth_key", "other") }, want: `Invalid auth_key: "other" is not a key of app "3"`},
		{name: "wrong version", edit: func(q url.Values) { q.Set("auth_version", "2.0") }, want: `Invalid auth_version: "2.0" is not supported (use 1.0)`},
		{name: "bad timestamp", edit: func(q url.Values) { q.Set("auth_timestamp", "yesterday") }, want: `Invalid auth_timestamp: "yesterday" is not Unix time in seconds`},
		{name: "huge timestamp", edit: func(q url.Values) { q.Set("auth_timestamp", "9223372036854775807") }, want: "Timestamp expired: Given timestamp (9223372036854775807) not within 600s"},
		{name: "negative timestamp", edit: func(q url.Values) { q.Set("auth_timestamp", "-9223372036854775808") }, want: "Timestamp expired: Given timestamp (-9223372036854775808)"},
		{name: "missing signature", edit: func(q url.Values) { q.Del("auth_signature") }, want: "Missing auth_signature"},
		{name: "missing key", edit: func(q url.Values) { q.Del("auth_key") }, want: "Missing auth_key"},
		{name: "missing timestamp", edit: func(q url.Values) { q.Del("auth_timestamp") }, want: "Missing auth_timestamp"},
		{name: "missing version", edit: func(q url.Values) { q.Del("auth_version") }, want: "Missing auth_version"},
		{name: "missing body_md5", edit: func(q url.Values) { q.Del("body_md5") }, want: "Invalid signature"},
		{name: "repeated parameter", edit: func(q url.Values) { q.Add("auth_key", docApp.Key) }, want: `Duplicate query parameter "auth_key"`},
		{name: "same parameter in two cases", edit: func(q url.Values) { q.Set("AUTH_KEY", docApp.Key) }, want: `Duplicate query parameter "auth_key"`},
		{name: "value with '&'", edit: func(q url.Values) { q.Set("info", "user_count&x=y") }, want: `Ambiguous query parameter "info": signature ambiguous, a value may not contain '&'`},
		{name: "key with '='", edit: func(q url.Values) { q.Set("a=b", "c") }, want: `Ambiguous query parameter "a=b": signature ambiguous, a key may not contain '&' or '='`},
		{name: "key with '&'", edit: func(q url.Values) { q.Set("a&b", "") }, want: `Ambiguous query parameter "a&b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, path, body := "POST", "/apps/3/events", docBody
			if tc.method != "" {
				method = tc.method
			}
			if tc.path != "" {
				path = tc.path
			}
			switch tc.body {
			case "":
			case "-":
				body = ""
			default:
				body = tc.body
			}
			q := docQuery()
			if tc.edit != nil {
				tc.edit(q)
			}
			err := verify(method, path, q, []byte(body), docApp, now)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			var authErr *Error
			require.True(t, errors.As(err, &authErr), "want an *auth.Error, got %T", err)
		})
	}
}

func TestVerifyBodyWithoutMD5(t *testing.T) {
	// A client that signs without body_md5 but sends a body is refused
	// even though its signature is right: the body would be unsigned.
	now := time.Unix(docTimestamp, 0)
	q := SignRequest("POST", "/apps/3/events", nil, nil, docApp.Key, docApp.Secret, now)
	err := verify("POST", "/apps/3/events", q, []byte(docBody), docApp, now)
	require.EqualError(t, err, "Missing body_md5: required when the request has a body")
}

// TestVerifyQueryBeforeTheBody: the query's signature is checked without
// the body, and what it signed about the body is checked once it is read.
func TestVerifyQueryBeforeTheBody(t *testing.T) {
	now := time.Unix(docTimestamp, 0)
	sq, err := VerifyQuery("POST", "/apps/3/events", docQuery(), docApp, now)
	require.NoError(t, err)
	require.NoError(t, sq.CheckLength(int64(len(docBody))))
	require.NoError(t, sq.CheckBody([]byte(docBody)))
	require.ErrorContains(t, sq.CheckBody([]byte("{}")), "Invalid body_md5")

	q := docQuery()
	q.Set("auth_signature", strings.Repeat("0", 64))
	_, err = VerifyQuery("POST", "/apps/3/events", q, docApp, now)
	require.ErrorContains(t, err, "Invalid signature")

	q = SignRequest("POST", "/apps/3/events", nil, nil, docApp.Key, docApp.Secret, now)
	sq, err = VerifyQuery("POST", "/apps/3/events", q, docApp, now)
	require.NoError(t, err)
	require.NoError(t, sq.CheckLength(0))
	require.NoError(t, sq.CheckLength(-1), "an unknown length is checked with the body")
	require.EqualError(t, sq.CheckLength(10), "Missing body_md5: required when the request has a body")
	require.NoError(t, sq.CheckBody(nil))
}

func TestSignRequestRoundTrip(t *testing.T) {
	now := time.Unix(1700000000, 0)
	q := SignRequest("GET", "/apps/3/channels", url.Values{"filter_by_prefix": {"presence-a;b"}, "info": {"user_count"}}, nil, docApp.Key, docApp.Secret, now)
	require.NoError(t, verify("GET", "/apps/3/channels", q, nil, docApp, now))
	// Encoded and parsed again, as it travels.
	back, err := ParseQuery(q.Encode())
	require.NoError(t, err)
	require.NoError(t, verify("GET", "/apps/3/channels", back, nil, docApp, now))

	body := []byte(`{}`)
	q = SignRequest("POST", "/apps/3/users/7/terminate_connections", nil, body, docApp.Key, docApp.Secret, now)
	require.Equal(t, "99914b932bd37a50b983c5e7c90ae93b", q.Get("body_md5"))
	require.NoError(t, verify("POST", "/apps/3/users/7/terminate_connections", q, body, docApp, now))
}

func TestVerifyAmbiguousReplay(t *testing.T) {
	// The string to sign does not escape values, so before ambiguous
	// parameters were refused, a signature for two parameters also held
	// for one parameter whose value spells both.
	const path = "/apps/3/channels"
	now := time.Unix(1700000000, 0)
	q := SignRequest("GET", path, url.Values{"filter_by_prefix": {"presence-"}, "info": {"user_count"}}, nil, docApp.Key, docApp.Secret, now)
	require.NoError(t, verify("GET", path, q, nil, docApp, now))

	raw := "filter_by_prefix=presence-%26info%3Duser_count"
	for _, k := range []string{"auth_key", "auth_timestamp", "auth_version", "auth_signature"} {
		raw += "&" + k + "=" + q.Get(k)
	}
	replay, err := ParseQuery(raw)
	require.NoError(t, err)
	require.Equal(t, "presence-&info=user_count", replay.Get("filter_by_prefix"))
	require.Empty(t, replay.Get("info"))
	same := func(v url.Values) string {
		params := map[string]string{}
		for k := range v {
			params[k] = v.Get(k)
		}
		return StringToSign("GET", path, params)
	}
	require.Equal(t, same(q), same(replay), "the two queries sign the same string")

	err = verify("GET", path, replay, nil, docApp, now)
	require.EqualError(t, err, `Ambiguous query parameter "filter_by_prefix": signature ambiguous, a value may not contain '&' once decoded, as the string to sign does not escape it`)
	var authErr *Error
	require.True(t, errors.As(err, &authErr))
}

func TestVerifySDKQueries(t *testing.T) {
	// What pusher-http-go and pusher-http-node put in the URL: values
	// unescaped, ',' in info lists, '=' and ';' in channel prefixes (legal
	// channel-name characters). All of it must still verify.
	const path = "/apps/3/channels"
	now := time.Unix(1700000000, 0)
	for _, params := range []url.Values{
		{"info": {"user_count,subscription_count"}},
		{"filter_by_prefix": {"x=y@z,w;"}, "info": {"user_count"}},
		{"filter_by_prefix": {"=="}},
	} {
		signed := SignRequest("GET", path, params, nil, docApp.Key, docApp.Secret, now)
		var raw []string
		for k := range signed {
			raw = append(raw, k+"="+signed.Get(k)) // unescaped, as the SDKs send it
		}
		for _, r := range []string{strings.Join(raw, "&"), signed.Encode()} {
			q, err := ParseQuery(r)
			require.NoError(t, err, r)
			require.NoError(t, verify("GET", path, q, nil, docApp, now), r)
		}
	}
}

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want url.Values
	}{
		{"", url.Values{}},
		{"a=1&b=2", url.Values{"a": {"1"}, "b": {"2"}}},
		// pusher-http-go sends values unescaped: ';' and ',' stay in the value.
		{"filter_by_prefix=presence-a;b&info=user_count,subscription_count", url.Values{"filter_by_prefix": {"presence-a;b"}, "info": {"user_count,subscription_count"}}},
		{"k=a=b", url.Values{"k": {"a=b"}}},
		{"k=%41+b", url.Values{"k": {"A b"}}},
		{"&&k&", url.Values{"k": {""}}},
		{"k=1&k=2", url.Values{"k": {"1", "2"}}},
	} {
		got, err := ParseQuery(tc.raw)
		require.NoError(t, err, tc.raw)
		require.Equal(t, tc.want, got, tc.raw)
	}
	_, err := ParseQuery("k=%zz")
	require.ErrorContains(t, err, `query parameter "k"`)
	_, err = ParseQuery("%=1")
	require.Error(t, err)
}

func TestCheckChannelAuth(t *testing.T) {
	const presenceData = `{"user_id":10,"user_info":{"name":"Mr. Channels"}}`
	const privateSig = "278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"
	const presenceSig = "278d425bdf160c739803:31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"
	for _, tc := range []struct {
		name, socket, channel, data, auth, want string
	}{
		{name: "private", socket: "1234.1234", channel: "private-foobar", auth: privateSig},
		// channel_data is not part of a private channel's signature.
		{name: "private ignores channel data", socket: "1234.1234", channel: "private-foobar", data: "{}", auth: privateSig},
		{name: "presence", socket: "1234.1234", channel: "presence-foobar", data: presenceData, auth: presenceSig},
		{name: "presence with re-serialized data", socket: "1234.1234", channel: "presence-foobar", data: `{"user_id":10,"user_info":{"name":"Mr.  Channels"}}`, auth: presenceSig, want: "Invalid signature: Expected HMAC SHA256 hex digest of "},
		{name: "other socket", socket: "1234.1235", channel: "private-foobar", auth: privateSig, want: `Invalid signature: Expected HMAC SHA256 hex digest of "1234.1235:private-foobar", but got "58df8b0c`},
		{name: "other channel", socket: "1234.1234", channel: "private-foobaz", auth: privateSig, want: "Invalid signature"},
		{name: "wrong key part", socket: "1234.1234", channel: "private-foobar", auth: "other:" + strings.SplitN(privateSig, ":", 2)[1], want: `Invalid key in auth value: "other" is not a key of app "3"`},
		{name: "no colon", socket: "1234.1234", channel: "private-foobar", auth: "58df8b0c", want: `Invalid auth value "58df8b0c": expected <app key>:<signature>`},
		{name: "empty", socket: "1234.1234", channel: "private-foobar", auth: "", want: "Invalid auth value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckChannelAuth(docApp, tc.socket, tc.channel, tc.data, tc.auth)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCheckSigninAuth(t *testing.T) {
	const good = "278d425bdf160c739803:4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba"
	require.NoError(t, CheckSigninAuth(docApp, "1234.1234", `{"id":"12345"}`, good))
	require.ErrorContains(t, CheckSigninAuth(docApp, "1234.1234", `{"id":"12346"}`, good), "Invalid signature")
	// The DOCS protocol example's "<key>::user::<sig>" form is not what the
	// server libraries produce; it is refused.
	require.Error(t, CheckSigninAuth(docApp, "1234.1234", `{"id":"12345"}`, "278d425bdf160c739803::user::4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba"))
}

// TestEveryKeyPairSigns: each of an app's key pairs signs API requests,
// channel subscriptions and sign-ins, the key in the request selecting its
// secret, and no key verifies with another pair's secret: what a secret's
// rotation without a gap relies on.
func TestEveryKeyPairSigns(t *testing.T) {
	now := time.Unix(1700000000, 0)
	app := &apps.App{ID: "3", Key: "old-key", Secret: "old-secret", Keys: []apps.KeyPair{{Key: "new-key", Secret: "new-secret"}}, Enabled: true}
	for _, p := range []apps.KeyPair{{Key: "old-key", Secret: "old-secret"}, {Key: "new-key", Secret: "new-secret"}} {
		q := SignRequest("GET", "/apps/3/channels", nil, nil, p.Key, p.Secret, now)
		require.NoError(t, verify("GET", "/apps/3/channels", q, nil, app, now), p.Key)
		sig := p.Key + ":" + Sign(p.Secret, ChannelAuthString("1.2", "private-a", ""))
		require.NoError(t, CheckChannelAuth(app, "1.2", "private-a", "", sig), p.Key)
		sig = p.Key + ":" + Sign(p.Secret, "1.2::user::{}")
		require.NoError(t, CheckSigninAuth(app, "1.2", "{}", sig), p.Key)
	}
	q := SignRequest("GET", "/apps/3/channels", nil, nil, "new-key", "old-secret", now)
	require.ErrorContains(t, verify("GET", "/apps/3/channels", q, nil, app, now), "Invalid signature")
	require.ErrorContains(t, CheckChannelAuth(app, "1.2", "private-a", "", "new-key:"+Sign("old-secret", "1.2:private-a")), "Invalid signature")
	q = SignRequest("GET", "/apps/3/channels", nil, nil, "gone-key", "old-secret", now)
	require.ErrorContains(t, verify("GET", "/apps/3/channels", q, nil, app, now), `Invalid auth_key: "gone-key" is not a key of app "3"`)
}
