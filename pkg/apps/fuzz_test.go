package apps

import "testing"

// FuzzParse: no apps file makes Parse panic, and an app it accepts has its
// origins checkable.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`[{"id":"a","key":"k","secret":"s","allowed_origins":["*.example.com","https://a.b"],"webhooks":[{"url":"u","lambda":{}}]}]`))
	f.Add([]byte(`[{"AppId":1,"key":"k","secret":"s","max_read_req_per_sec":3,"capacities":[{"Prefix":"p","capacity":2}]}]`))
	f.Add([]byte(`{"port":6001,"appManager":{"driver":"array","array":{"apps":[{"id":1,"key":"k","secret":"s"}]}},"database.redis.host":"r"}`))
	f.Fuzz(func(_ *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		for _, a := range r.All() {
			_ = a.AllowsOrigin("https://x.example.com")
		}
	})
}

// FuzzAllowsOrigin: matching never panics, and "*" allows everything.
func FuzzAllowsOrigin(f *testing.F) {
	f.Add("*.example.com", "https://a.example.com")
	f.Add("https://a.example.com", "null")
	f.Fuzz(func(t *testing.T, entry, origin string) {
		_ = (&App{AllowedOrigins: []string{entry}}).AllowsOrigin(origin)
		if !(&App{AllowedOrigins: []string{entry, "*"}}).AllowsOrigin(origin) {
			t.Fatalf("* refused %q", origin)
		}
	})
}
