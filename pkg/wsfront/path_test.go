package wsfront_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/wsfront"
)

// ParsePath takes the key from /app/{key} and the key and resume id from
// /r/{id}/app/{key}, and nothing else.
func TestParsePath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ path, key, id string }{
		{"/app/app-key", "app-key", ""},
		{"/r/abcdEFGH/app/app-key", "app-key", "abcdEFGH"},
		{"/r/0123456789_-/app/k", "k", "0123456789_-"},
		{"/r/" + strings.Repeat("x", 64) + "/app/k", "k", strings.Repeat("x", 64)},
	} {
		key, id, err := wsfront.ParsePath(tc.path)
		require.NoError(t, err, tc.path)
		require.Equal(t, tc.key, key, tc.path)
		require.Equal(t, tc.id, id, tc.path)
	}
	for _, path := range []string{
		"", "/", "/app", "/app/", "/app/k/", "/app/k/x", "/apps/k", "app/k",
		"/r/abcdefgh", "/r/abcdefgh/", "/r/abcdefgh/app/", "/r/abcdefgh/app/k/x",
		"/r/abcdefg/app/k", "/r/" + strings.Repeat("x", 65) + "/app/k",
		"/r//app/k", "/r/abcd.efgh/app/k", "/r/abcd efgh/app/k", "/r/abcdéfgh/app/k",
		"/r/abcdefgh/r/abcdefgh/app/k", "/x/r/abcdefgh/app/k",
	} {
		_, _, err := wsfront.ParsePath(path)
		require.Error(t, err, "%q", path)
	}
}

// FuzzParsePath: whatever ParsePath accepts is exactly /app/{key} or
// /r/{id}/app/{key} rebuilt from what it returned, with a key that is not
// empty and has no slash and an id that is empty or 8-64 characters of
// A-Z a-z 0-9 _ -.
func FuzzParsePath(f *testing.F) {
	for _, p := range []string{"/app/app-key", "/r/abcdefgh/app/app-key", "/r/abc/app/k", "/r/abcdefgh", "/app/", "/r/x/y/app/k"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		key, id, err := wsfront.ParsePath(path)
		if err != nil {
			require.Empty(t, key)
			require.Empty(t, id)
			return
		}
		require.NotEmpty(t, key)
		require.NotContains(t, key, "/")
		if id == "" {
			require.Equal(t, "/app/"+key, path)
			return
		}
		require.Equal(t, "/r/"+id+"/app/"+key, path)
		require.GreaterOrEqual(t, len(id), 8)
		require.LessOrEqual(t, len(id), 64)
		require.Empty(t, strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"), id)
	})
}
