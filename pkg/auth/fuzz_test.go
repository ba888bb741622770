package auth

import (
	"errors"
	"maps"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzVerify feeds arbitrary requests to ParseQuery and to the checks
// httpapi runs, in its order (verify): none may panic. Whatever the fuzzer adds, a request re-signed with
// the app's secret must then pass, and any change to its signature must not.
func FuzzVerify(f *testing.F) {
	f.Add("POST", "/apps/3/events", "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f&auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c", []byte(docBody), int64(docTimestamp))
	f.Add("GET", "/apps/3/channels", "filter_by_prefix=presence-a;b&info=user_count", []byte(nil), int64(1700000000))
	f.Add("GET", "/apps/3/channels/private-x", "info=subscription_count&auth_timestamp=99999999999999999999", []byte(nil), int64(0))
	f.Add("get", "/", "&&=&%41=%zz&AUTH_KEY=x&auth_key=y", []byte("x"), int64(-1))
	f.Fuzz(func(t *testing.T, method, path, rawQuery string, body []byte, now int64) {
		clock := time.Unix(now, 0)
		q, err := ParseQuery(rawQuery)
		if err != nil {
			return
		}
		if err := verify(method, path, q, body, docApp, clock); err == nil && q.Get("auth_signature") == "" {
			t.Fatalf("accepted a request without a signature: %q", rawQuery)
		}

		// Keep the fuzzer's own parameters (once each) and sign them.
		own := url.Values{}
		seen := map[string]bool{}
		for k, vs := range q {
			lk := strings.ToLower(k)
			if strings.HasPrefix(lk, "auth_") || lk == "body_md5" || seen[lk] {
				continue
			}
			if strings.ContainsAny(lk, "&=") || strings.Contains(vs[0], "&") {
				continue // ambiguous once signed; FuzzSignedQuery covers these
			}
			seen[lk] = true
			own[k] = vs[:1]
		}
		signed := SignRequest(method, path, own, body, docApp.Key, docApp.Secret, clock)
		if err := verify(method, path, signed, body, docApp, clock); err != nil {
			t.Fatalf("a correctly signed request was refused: %v", err)
		}
		signed.Set("auth_signature", Sign("not-the-secret", "x"))
		if err := verify(method, path, signed, body, docApp, clock); err == nil {
			t.Fatal("a request signed with another secret was accepted")
		}
	})
}

// FuzzSignedQuery checks that the string to sign binds the query: whatever
// the fuzzer sends, two queries that signedParams accepts and that sign the
// same string are the same query. It checks a stronger property too: the
// query part of the string to sign reads back, split on '&' and each pair
// at its first '=', to exactly the accepted parameters, so no second query
// can share it.
func FuzzSignedQuery(f *testing.F) {
	// The replay that used to pass: one value carrying a second parameter.
	f.Add("filter_by_prefix=presence-&info=user_count", "filter_by_prefix=presence-%26info%3Duser_count")
	f.Add("a%3Db=c", "a=b%3Dc")
	f.Add("filter_by_prefix=x=y@z,w;&info=user_count,subscription_count", "INFO=user_count,subscription_count&filter_by_prefix=x%3Dy%40z%2Cw%3B")
	f.Add("=&k", "k=&%3D")
	f.Add("", "auth_signature=x")
	f.Fuzz(func(t *testing.T, rawA, rawB string) {
		a, okA := acceptedParams(t, rawA)
		b, okB := acceptedParams(t, rawB)
		if okA && okB && StringToSign("GET", "/p", a) == StringToSign("GET", "/p", b) {
			delete(a, "auth_signature")
			delete(b, "auth_signature")
			require.Equal(t, a, b, "%q and %q sign the same string", rawA, rawB)
		}
	})
}

// acceptedParams parses raw as the server does and, if signedParams accepts
// it, checks that its string to sign reads back to it.
func acceptedParams(t *testing.T, raw string) (map[string]string, bool) {
	t.Helper()
	q, err := ParseQuery(raw)
	if err != nil {
		return nil, false
	}
	params, err := signedParams(q)
	if err != nil {
		var authErr *Error
		require.True(t, errors.As(err, &authErr), "want an *auth.Error, got %T", err)
		return nil, false
	}
	query := strings.TrimPrefix(StringToSign("GET", "/p", params), "GET\n/p\n")
	back := map[string]string{}
	for pair := range strings.SplitSeq(query, "&") {
		if query == "" {
			break // no parameters at all
		}
		k, v, _ := strings.Cut(pair, "=")
		_, dup := back[k]
		require.False(t, dup, "key %q twice in the string to sign of %q", k, raw)
		back[k] = v
	}
	want := maps.Clone(params)
	delete(want, "auth_signature")
	require.Equal(t, want, back, "the string to sign of %q reads back to other parameters", raw)
	return params, true
}
