package apps

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeyPairs(t *testing.T) {
	r, err := Parse([]byte(`[
	  {"id": "a", "key": "k1", "secret": "s1", "keys": [{"key": "k2", "secret": "s2"}, {"key": "k3", "secret": "s3"}]},
	  {"id": "b", "key": "k4", "secret": "s4"}
	]`))
	require.NoError(t, err)
	for key, secret := range map[string]string{"k1": "s1", "k2": "s2", "k3": "s3"} {
		a := r.ByKey(key)
		require.NotNil(t, a, key)
		require.Equal(t, "a", a.ID)
		got, ok := a.SecretFor(key)
		require.True(t, ok)
		require.Equal(t, secret, got)
	}
	_, ok := r.ByID("a").SecretFor("k4")
	require.False(t, ok, "another app's key")
	require.Equal(t, "k1", r.ByID("a").Key, "the first pair signs webhooks")

	for name, in := range map[string]string{
		"key of another app":   `[{"id":"a","key":"k1","secret":"s","keys":[{"key":"k2","secret":"s"}]},{"id":"b","key":"k2","secret":"s"}]`,
		"key listed twice":     `[{"id":"a","key":"k1","secret":"s","keys":[{"key":"k1","secret":"t"}]}]`,
		"pair without secret":  `[{"id":"a","key":"k1","secret":"s","keys":[{"key":"k2"}]}]`,
		"pair with a bad key":  `[{"id":"a","key":"k1","secret":"s","keys":[{"key":"k/2","secret":"s"}]}]`,
		"keys not a list":      `[{"id":"a","key":"k1","secret":"s","keys":{"key":"k2","secret":"s"}}]`,
		"unknown field in one": `[{"id":"a","key":"k1","secret":"s","keys":[{"key":"k2","secret":"s","sekret":"x"}]}]`,
	} {
		_, err := Parse([]byte(in))
		require.Error(t, err, name)
		t.Logf("%s: %v", name, err)
	}
}

func TestReplaceDiff(t *testing.T) {
	r, err := Parse([]byte(`[{"id":"a","key":"ka","secret":"s"},{"id":"b","key":"kb","secret":"s"},{"id":"c","key":"kc","secret":"s"}]`))
	require.NoError(t, err)
	v1 := r.Version()
	require.Len(t, v1.Hash, 12)
	a, b := r.ByID("a"), r.ByID("b")

	next, err := Parse([]byte(`[
	  {"id":"a","key":"ka","secret":"s"},
	  {"id":"b","key":"kb","secret":"s","enabled":false},
	  {"id":"d","key":"kd","secret":"s","keys":[{"key":"kc","secret":"t"}]}]`))
	require.NoError(t, err)
	d := r.Replace(next)
	require.Equal(t, Diff{Added: []string{"d"}, Removed: []string{"c"}, Changed: []string{"b"}, Disabled: []string{"b"}}, d)
	require.NotEqual(t, v1.Hash, r.Version().Hash)
	require.Nil(t, r.ByID("c"))
	require.Equal(t, "d", r.ByKey("kc").ID, "a key moves with its pair")
	require.Same(t, a, r.ByID("a"), "an app that did not change keeps its *App")
	require.NotSame(t, b, r.ByID("b"), "a changed app is a new *App; the old one is left as it was")
	require.True(t, b.Enabled)

	same, err := Parse([]byte(` [ {"id":"a","key":"ka","secret":"s"}, {"id":"b","key":"kb","secret":"s","enabled":false},
	  {"id":"d","key":"kd","secret":"s","keys":[{"key":"kc","secret":"t"}]} ]`))
	require.NoError(t, err)
	hash := r.Version().Hash
	require.True(t, r.Replace(same).Empty())
	require.Equal(t, hash, r.Version().Hash, "formatting is not content")
}

func TestZeroRegistry(t *testing.T) {
	var r Registry
	require.False(t, r.Loaded())
	require.Nil(t, r.ByID("a"))
	require.Nil(t, r.ByKey("a"))
	require.Empty(t, r.All())
	next, err := Parse([]byte(`[{"id":"a","key":"ka","secret":"s"}]`))
	require.NoError(t, err)
	require.Equal(t, Diff{Added: []string{"a"}}, r.Replace(next))
	require.True(t, r.Loaded())
}

func TestChangedWakesOnChangesOnly(t *testing.T) {
	r, err := Parse([]byte(`[{"id":"a","key":"ka","secret":"s"}]`))
	require.NoError(t, err)
	c := r.Changed()
	same, _ := Parse([]byte(`[{"id":"a","key":"ka","secret":"s"}]`))
	r.Replace(same)
	select {
	case <-c:
		t.Fatal("woken by a replace that changed nothing")
	default:
	}
	next, _ := Parse([]byte(`[{"id":"a","key":"ka","secret":"t"}]`))
	r.Replace(next)
	<-c
	require.NotEqual(t, c, r.Changed(), "a new channel for the next change")
}
