package auth

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzVerifyRequest feeds arbitrary requests to ParseQuery and VerifyRequest,
// which must never panic. Whatever the fuzzer adds, a request re-signed with
// the app's secret must then pass, and any change to its signature must not.
func FuzzVerifyRequest(f *testing.F) {
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
		if err := VerifyRequest(method, path, q, body, docApp, clock); err == nil && q.Get("auth_signature") == "" {
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
			seen[lk] = true
			own[k] = vs[:1]
		}
		signed := SignRequest(method, path, own, body, docApp.Key, docApp.Secret, clock)
		if err := VerifyRequest(method, path, signed, body, docApp, clock); err != nil {
			t.Fatalf("a correctly signed request was refused: %v", err)
		}
		signed.Set("auth_signature", Sign("not-the-secret", "x"))
		if err := VerifyRequest(method, path, signed, body, docApp, clock); err == nil {
			t.Fatal("a request signed with another secret was accepted")
		}
	})
}
