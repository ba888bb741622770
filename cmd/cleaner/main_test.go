package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBadConfigExits2NamingTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dead-after", "soon"}, "dead-after"},
		{[]string{"--lease-ttl", "1ms"}, "--lease-ttl"},
		{[]string{"--redis", "nope://x"}, "--redis"},
		{[]string{"frobnicate"}, "frobnicate"},
	} {
		var stderr bytes.Buffer
		code := run(tc.args, func(string) string { return "" }, &stderr)
		require.Equal(t, 2, code, "%v", tc.args)
		require.Contains(t, stderr.String(), tc.want)
	}
}
